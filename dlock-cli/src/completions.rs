//! `dlock completions <shell>`: the shell completion script for every command and option, made
//! by clap_complete from the same definition clap parses, so it cannot drift from the tool.
//! Needs no configuration and touches no backend.

use clap::{Args, CommandFactory};
use clap_complete::Shell;
use dlock::LockError;

use super::redactor::Redactor;

/// Arguments of `dlock completions`.
#[derive(Args)]
pub(crate) struct CompletionsArgs {
    /// The shell to complete in: bash, zsh, fish (or elvish, powershell).
    shell: Shell,
}

pub(crate) fn run(args: CompletionsArgs, out: &Redactor) -> Result<bool, LockError> {
    // Written to a buffer first: clap_complete panics when its writer fails (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(args.shell, &mut super::Cli::command(), "dlock", &mut script);
    out.println(String::from_utf8_lossy(&script).trim_end());
    Ok(true)
}
