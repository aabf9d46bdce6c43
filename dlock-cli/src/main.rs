//! The `dlock` command-line tool: [`dlock_cli::main`] over the backends this build compiles in.
//! An application with backends of its own registers them and calls the same function from its
//! own binary.

fn main() -> std::process::ExitCode {
    dlock_cli::main()
}
