//! `-q`/`--quiet`: every command that prints progress takes it, with the same meaning (nothing on
//! stderr but errors); the other commands print no progress at all.

mod common;

use common::{Sandbox, assert_success, stderr, stdout};

/// The commands that print progress, each with arguments that make it quick on the host backend.
fn commands_with_progress(sandbox: &Sandbox) -> Vec<Vec<String>> {
    let config = sandbox.small_recsys();
    let cache = sandbox.cache_dir("cache");
    let model = ["--backend", "host", "--model-config", config.as_str(), "--cache-dir", cache.as_str()];
    let perf = [&["perf"][..], &model, &["--requests", "20", "--warmup-time", "0"]].concat();
    let warmup = [&["warmup"][..], &model, &["--buckets", "list:1,2"]].concat();
    [perf, warmup].into_iter().map(|args| args.into_iter().map(str::to_string).collect()).collect()
}

fn run(sandbox: &Sandbox, args: &[String]) -> std::process::Output {
    sandbox.saggar().args(args).output().expect("the saggar binary runs")
}

#[test]
fn every_command_that_prints_progress_is_silent_with_quiet() {
    let sandbox = Sandbox::new();
    for command in commands_with_progress(&sandbox) {
        // Without the flag, progress lines go to stderr (it is not a terminal here).
        let loud = run(&sandbox, &command);
        assert_success(&loud);
        assert!(stderr(&loud).contains("saggar: "), "`saggar {}` prints no progress:\n{}", command[0], stderr(&loud));
        for flag in ["-q", "--quiet"] {
            let quiet = run(&sandbox, &[command.clone(), vec![flag.to_string()]].concat());
            assert_success(&quiet);
            assert_eq!(stderr(&quiet), "", "`saggar {} {flag}` wrote to stderr", command[0]);
            assert_eq!(
                stdout(&quiet).lines().next().map(|l| l.split_whitespace().next()),
                stdout(&loud).lines().next().map(|l| l.split_whitespace().next()),
                "`saggar {} {flag}` prints the same report",
                command[0]
            );
        }
    }
}

#[test]
fn quiet_is_in_the_help_of_every_command_that_prints_progress() {
    let sandbox = Sandbox::new();
    for command in ["perf", "warmup"] {
        let help = sandbox.run(&[command, "--help"]);
        assert_success(&help);
        assert!(stdout(&help).contains("-q, --quiet"), "`saggar {command} --help` has no -q:\n{}", stdout(&help));
    }
}

#[test]
fn the_other_commands_print_no_progress() {
    let sandbox = Sandbox::new();
    let config = sandbox.small_recsys();
    let cache = sandbox.cache_dir("cache");
    let warmed = sandbox.run(&["warmup", "-q", "--backend", "host", "--model-config", &config, "--cache-dir", &cache]);
    assert_success(&warmed);
    let commands: [&[&str]; 5] = [
        &["devices"],
        &["cache", "ls", "--cache-dir", &cache],
        &["cache", "verify", "--cache-dir", &cache],
        &["cache", "gc", "--cache-dir", &cache],
        &["cache", "key", "--model-config", &config, "--bucket", "8", "--backend", "host", "--cache-dir", &cache],
    ];
    for args in commands {
        let output = sandbox.run(args);
        assert_success(&output);
        assert_eq!(stderr(&output), "", "`saggar {}` wrote to stderr", args.join(" "));
    }
}
