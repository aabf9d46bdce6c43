//! `dlock completions <shell>`: a script for bash, zsh and fish that names every command, and in
//! bash (the one shell here) completes a command and its options when sourced.

use std::process::{Command, Output};

fn dlock(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_dlock"))
        .args(args)
        .env_remove("DLOCK_URL")
        .output()
        .expect("the dlock binary runs")
}

const COMMANDS: [&str; 12] = [
    "conformance",
    "acquire",
    "config",
    "doctor",
    "bench",
    "run",
    "status",
    "list",
    "watch",
    "init",
    "release",
    "completions",
];

#[test]
fn every_shell_gets_a_script_that_names_every_command() {
    for shell in ["bash", "zsh", "fish"] {
        let out = dlock(&["completions", shell]);
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{shell}: {}", String::from_utf8_lossy(&out.stderr));
        for command in COMMANDS {
            assert!(script.contains(command), "{shell}: no {command:?} in\n{script}");
        }
        assert!(script.contains("--url") || script.contains("-l url"), "{shell}: no --url in\n{script}");
    }
    let out = dlock(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "an unknown shell is a usage error");
}

/// Runs the bash script's completion function on `words` (the last one being completed) and
/// returns the candidates it offers.
fn bash_candidates(script: &str, words: &[&str]) -> Vec<String> {
    let quoted: Vec<String> = words.iter().map(|w| format!("'{w}'")).collect();
    let program = format!(
        "{script}\nCOMP_WORDS=({})\nCOMP_CWORD={}\nCOMP_LINE=\"${{COMP_WORDS[*]}}\"\nCOMP_POINT=${{#COMP_LINE}}\n\
         _dlock dlock '{}' '{}'\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"",
        quoted.join(" "),
        words.len() - 1,
        words[words.len() - 1],
        words[words.len() - 2],
    );
    let out = Command::new("bash").arg("-c").arg(program).output().expect("bash runs");
    assert!(out.status.success(), "bash: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_owned).collect()
}

#[test]
fn bash_completes_commands_and_their_options() {
    let out = dlock(&["completions", "bash"]);
    let script = String::from_utf8_lossy(&out.stdout).into_owned();
    let commands = bash_candidates(&script, &["dlock", "sta"]);
    assert_eq!(commands, ["status"], "dlock sta<TAB>");
    let options = bash_candidates(&script, &["dlock", "run", "--wa"]);
    assert_eq!(options, ["--wait"], "dlock run --wa<TAB>");
}
