//! The `saggar` binary. Everything lives in the `saggar_cli` library (one module per command); this
//! only hands the process over to it.

fn main() -> std::process::ExitCode {
    saggar_cli::main()
}
