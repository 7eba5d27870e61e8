//! The `kiln` binary. Everything lives in the `kiln_cli` library (one module per command); this
//! only hands the process over to it.

fn main() -> std::process::ExitCode {
    kiln_cli::main()
}
