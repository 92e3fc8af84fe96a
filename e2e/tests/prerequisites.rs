//! `e2e/prerequisites` installs, per mode, what that mode's scripts call:
//! every command a mode's scripts run must come from the base system, the
//! toolchains, the project's own build, a function of the scripts, or that
//! mode's list. A new tool in a script without its package in the list
//! fails here, before a new user meets it. No cluster needed.

use std::collections::BTreeSet;
use std::process::Command;

/// The scripts each mode runs, beside `e2e/prerequisites` itself.
/// `e2e/cluster` sources `e2e/processes.sh` and `e2e/node/node.sh` but calls it only with the real
/// node, which the process demo leaves out.
const DEMO: &[&str] = &["e2e/demo", "e2e/cluster", "e2e/processes.sh"];
const PODS: &[&str] = &[
    "e2e/demo",
    "e2e/cluster",
    "e2e/processes.sh",
    "e2e/node/node.sh",
    "images/build",
    "images/pack",
];
const CI: &[&str] = &[
    "e2e/demo",
    "e2e/cluster",
    "e2e/processes.sh",
    "e2e/node/node.sh",
    "images/build",
    "images/pack",
    ".ci/run",
    "e2e/test",
    "e2e/login-tools",
    "e2e/upstream-controllers",
    "e2e/olm",
    "charts/generate",
];

/// Shell keywords and builtins.
const SHELL: &[&str] = &[
    "!",
    "[",
    "[[",
    "]]",
    "alias",
    "break",
    "case",
    "cd",
    "command",
    "continue",
    "declare",
    "do",
    "done",
    "echo",
    "elif",
    "else",
    "esac",
    "eval",
    "exec",
    "exit",
    "export",
    "false",
    "fi",
    "for",
    "function",
    "if",
    "in",
    "kill",
    "local",
    "mapfile",
    "popd",
    "printf",
    "pushd",
    "pwd",
    "read",
    "readarray",
    "return",
    "set",
    "shift",
    "source",
    "test",
    "then",
    "time",
    "trap",
    "true",
    "type",
    "umask",
    "unset",
    "until",
    "wait",
    "while",
    ".",
    ":",
];

/// What every Debian system has (essential and required packages:
/// coreutils, findutils, grep, sed, mawk, tar, gzip, util-linux's mount,
/// procps, hostname), the toolchains a developer brings (Rust, Go, Python,
/// git), and the binaries the project builds itself (`e2e/cluster build`
/// puts kubectl and helm on the PATH it prints).
const BASE: &[&str] = &[
    "awk",
    "base64",
    "basename",
    "cat",
    "chmod",
    "chown",
    "cmp",
    "cp",
    "cut",
    "date",
    "dd",
    "df",
    "diff",
    "dirname",
    "du",
    "env",
    "find",
    "grep",
    "gzip",
    "head",
    "hostname",
    "id",
    "install",
    "ln",
    "ls",
    "mkdir",
    "mktemp",
    "mount",
    "mv",
    "nproc",
    "od",
    "ps",
    "readlink",
    "realpath",
    "rm",
    "rmdir",
    "sed",
    "seq",
    "sha256sum",
    "sleep",
    "sort",
    "stat",
    "tail",
    "tar",
    "tee",
    "timeout",
    "touch",
    "tr",
    "umount",
    "uname",
    "uniq",
    "wc",
    "xargs",
    "yes",
    "cargo",
    "rustup",
    "go",
    "python3",
    "git",
    "kubectl",
    "helm",
    "apt-get",
];

fn prerequisites(mode: &str) -> BTreeSet<String> {
    let out = Command::new(kubeflow_e2e::repo_root().join("e2e/prerequisites"))
        .args(["tools", mode])
        .output()
        .expect("e2e/prerequisites runs");
    assert!(
        out.status.success(),
        "e2e/prerequisites tools {mode} failed"
    );
    let tools: BTreeSet<String> = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_string)
        .collect();
    assert!(!tools.is_empty(), "no tools listed for {mode}");
    tools
}

/// The text of a script, with here-documents' bodies left out (they are
/// data: YAML, Go, config files).
fn script(path: &str) -> String {
    let text = std::fs::read_to_string(kubeflow_e2e::repo_root().join(path))
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    without_heredocs(&text)
}

fn without_heredocs(text: &str) -> String {
    let mut out = String::new();
    let mut until: Option<String> = None;
    for line in text.lines() {
        if let Some(end) = &until {
            if line.trim() == end {
                until = None;
            }
            continue;
        }
        out.push_str(line);
        out.push('\n');
        // `<<<` is a here-string, not a here-document.
        if let Some(at) = line.find("<<").filter(|&at| !line[at..].starts_with("<<<")) {
            let word: String = line[at + 2..]
                .trim_start_matches('-')
                .trim_start()
                .trim_start_matches(['\'', '"'])
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !word.is_empty() {
                until = Some(word);
            }
        }
    }
    out
}

/// Functions a script defines (`name() {`).
fn functions(text: &str) -> BTreeSet<String> {
    text.lines()
        .filter_map(|l| {
            let l = l.trim_start().trim_start_matches("function ");
            let name = l.split("()").next()?;
            (l.contains("()")
                && !name.is_empty()
                && name
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-'))
            .then(|| name.to_string())
        })
        .collect()
}

/// The words a script runs as commands: the first word of each simple
/// command, at the start of a line, after `;`, `|`, `&&`, `||`, `(`, `{`,
/// `$(` (also inside double quotes), a backtick, a case pattern and a
/// keyword that starts a command list, skipping variable assignments.
/// Quoted text outside a command substitution is data, and so are
/// comments, parameter expansions, array literals and `(( ))`.
fn commands(text: &str) -> BTreeSet<String> {
    let mut found = BTreeSet::new();
    let mut case_depth = 0usize;
    for raw in logical_lines(text) {
        let raw = raw.as_str();
        let mut line = raw.trim_start();
        if line.starts_with('#') {
            continue;
        }
        let first = line.split_whitespace().next().unwrap_or_default();
        // A one-line `case ... esac` opens nothing.
        if first == "case" && !line.split_whitespace().any(|w| w == "esac") {
            case_depth += 1;
        }
        if first == "esac" || first.starts_with("esac;") {
            case_depth = case_depth.saturating_sub(1);
        }
        // A case pattern (`a | b)`) is not a command; what follows it is.
        if case_depth > 0
            && first != "case"
            && let Some(close) = line.find(')')
            && !line[..close].contains(['(', '='])
        {
            line = &line[close + 1..];
        }
        let mut words = Vec::new();
        scan(line, &mut words);
        let mut next_is_command = false;
        for (w, at) in words {
            if !(at || next_is_command) {
                continue;
            }
            next_is_command = false;
            let assignment = w.split_once('=').is_some_and(|(name, _)| {
                let name = name.trim_end_matches('+');
                let name = name.split('[').next().unwrap_or_default();
                !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            });
            if assignment {
                next_is_command = true;
                continue;
            }
            match w.as_str() {
                // `command -v X` asks whether X exists; it does not run it.
                "command" => {}
                "then" | "do" | "else" | "elif" | "if" | "while" | "until" | "!" | "time" => {
                    next_is_command = true
                }
                // Prefixes that run their argument as a command.
                "exec" | "setsid" | "xargs" | "env" | "sudo" | "nohup" => {
                    found.insert(w.clone());
                    next_is_command = true;
                }
                _ => {
                    found.insert(w);
                }
            }
        }
    }
    found
        .into_iter()
        .filter(|w| {
            // Paths ("$BIN_DIR/kubectl", "./x") and expansions are not
            // names looked up on the PATH.
            w.chars().next().is_some_and(|c| c.is_ascii_lowercase())
                && w.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-_.+".contains(c))
        })
        .collect()
}

/// The script's lines, with comments dropped, a quoted string or a
/// backslash continuation that spans lines joined into one.
fn logical_lines(text: &str) -> Vec<String> {
    let mut lines = Vec::new();
    let mut line = String::new();
    let (mut single, mut double) = (false, false);
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if !single => {
                match chars.next() {
                    Some('\n') => line.push(' '),
                    Some(n) => {
                        line.push('\\');
                        line.push(n);
                    }
                    None => {}
                }
                continue;
            }
            '\'' if !double => single = !single,
            '"' if !single => double = !double,
            '#' if !single
                && !double
                && line
                    .chars()
                    .last()
                    .is_none_or(|p| p.is_whitespace() || p == ';') =>
            {
                while chars.peek().is_some_and(|&n| n != '\n') {
                    chars.next();
                }
                continue;
            }
            '\n' if single || double => {
                line.push(' ');
                continue;
            }
            '\n' => {
                lines.push(std::mem::take(&mut line));
                continue;
            }
            _ => {}
        }
        line.push(c);
    }
    lines.push(line);
    lines
}

/// Splits one line into words, each with whether it stands where a command
/// does.
fn scan(line: &str, words: &mut Vec<(String, bool)>) {
    let chars: Vec<char> = line.chars().collect();
    let mut word = String::new();
    let mut at_command = true;
    // Open contexts: '"' double quotes, '(' a command substitution.
    let mut stack: Vec<char> = Vec::new();
    let flush = |word: &mut String, at: &mut bool, words: &mut Vec<(String, bool)>| {
        if !word.is_empty() {
            words.push((std::mem::take(word), *at));
            *at = false;
        }
    };
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        if stack.last() == Some(&'"') {
            match c {
                '\\' => i += 1,
                '"' => {
                    stack.pop();
                }
                '$' if next == Some('(') && chars.get(i + 2) == Some(&'(') => {
                    i = skip_to_close(&chars, i + 1, '(', ')');
                    continue;
                }
                '$' if next == Some('(') => {
                    flush(&mut word, &mut at_command, words);
                    stack.push('(');
                    at_command = true;
                    i += 1;
                }
                _ => {}
            }
            i += 1;
            continue;
        }
        match c {
            '#' if word.is_empty() => break,
            '\'' => {
                while i + 1 < chars.len() && chars[i + 1] != '\'' {
                    i += 1;
                }
                i += 1;
                word.push('\'');
            }
            '"' => {
                stack.push('"');
                word.push('"');
            }
            '\\' => {
                i += 1;
                word.push('\\');
            }
            '$' if next == Some('(') && chars.get(i + 2) == Some(&'(') => {
                i = skip_to_close(&chars, i + 1, '(', ')');
                word.push('$');
                continue;
            }
            '$' if next == Some('(') => {
                flush(&mut word, &mut at_command, words);
                stack.push('(');
                at_command = true;
                i += 1;
            }
            '$' if next == Some('{') => {
                i = skip_to_close(&chars, i + 1, '{', '}') - 1;
                word.push('$');
            }
            // An array literal `name=( ... )`: data.
            '(' if word.ends_with('=') => {
                i = skip_to_close(&chars, i, '(', ')');
                word.push_str("()");
                continue;
            }
            '(' if next == Some('(') && word.is_empty() => {
                i = skip_to_close(&chars, i, '(', ')');
                at_command = false;
                continue;
            }
            ')' => {
                flush(&mut word, &mut at_command, words);
                // The end of a substitution continues the word it is in;
                // the end of a subshell is followed by an operator.
                if stack.last() == Some(&'(') {
                    stack.pop();
                }
                at_command = false;
            }
            ';' | '|' | '&' | '(' | '{' | '`' => {
                flush(&mut word, &mut at_command, words);
                at_command = true;
            }
            '<' | '>' => {
                flush(&mut word, &mut at_command, words);
                at_command = false;
            }
            c if c.is_whitespace() => flush(&mut word, &mut at_command, words),
            c => word.push(c),
        }
        i += 1;
    }
    flush(&mut word, &mut at_command, words);
}

/// The index just past the bracket that closes the `open` at `start`
/// (`(` with `)`, `{` with `}`), nested ones included.
fn skip_to_close(chars: &[char], start: usize, open: char, close: char) -> usize {
    let mut depth = 0;
    let mut i = start;
    while i < chars.len() {
        if chars[i] == open {
            depth += 1;
        } else if chars[i] == close {
            depth -= 1;
            if depth == 0 {
                return i + 1;
            }
        }
        i += 1;
    }
    i
}

fn unprovided(listed: &BTreeSet<String>, scripts: &[&str]) -> Vec<String> {
    let mut known: BTreeSet<String> = SHELL.iter().chain(BASE).map(|s| s.to_string()).collect();
    // Any script's functions (e2e/cluster calls node.sh's by name).
    for path in CI.iter().chain(["e2e/prerequisites"].iter()) {
        known.extend(functions(&script(path)));
    }
    let mut missing = Vec::new();
    for path in scripts.iter().chain(["e2e/prerequisites"].iter()) {
        for cmd in commands(&script(path)) {
            if !known.contains(&cmd) && !listed.contains(&cmd) {
                missing.push(format!("{path}: {cmd}"));
            }
        }
    }
    missing
}

#[test]
fn each_mode_installs_every_tool_its_scripts_call() {
    for (mode, scripts) in [("demo", DEMO), ("pods", PODS), ("ci", CI)] {
        let missing = unprovided(&prerequisites(mode), scripts);
        assert!(
            missing.is_empty(),
            "e2e/prerequisites {mode} does not provide what these scripts call \
             (add the command and its Debian package to its TOOLS list):\n{}",
            missing.join("\n")
        );
    }
}

/// The check fails when a list lacks a tool its scripts call.
#[test]
fn a_tool_left_out_of_a_list_is_found() {
    let mut listed = prerequisites("demo");
    assert!(listed.remove("curl"), "the demo lists curl");
    let missing = unprovided(&listed, DEMO);
    assert!(
        missing.iter().any(|m| m.ends_with(": curl")),
        "curl's absence went unseen: {missing:?}"
    );
    // And the node's tools are not what the process demo's scripts call.
    let missing = unprovided(&BTreeSet::new(), DEMO);
    for node_tool in ["runc", "umoci", "iptables"] {
        assert!(
            !missing
                .iter()
                .any(|m| m.ends_with(&format!(": {node_tool}"))),
            "{missing:?}"
        );
    }
}

#[test]
fn the_process_demo_needs_nothing_of_the_real_node() {
    let demo = prerequisites("demo");
    for node_tool in ["runc", "umoci", "musl-gcc", "iptables", "ip"] {
        assert!(
            !demo.contains(node_tool),
            "the process demo installs {node_tool}"
        );
        assert!(
            prerequisites("pods").contains(node_tool),
            "pods lacks {node_tool}"
        );
    }
    // ... because it leaves the real node out of the cluster it starts.
    let text = script("e2e/demo");
    assert!(
        text.contains("export KUBEFLOW_E2E_REAL_NODE=${KUBEFLOW_E2E_REAL_NODE:-0}"),
        "e2e/demo's process mode no longer leaves the real node out"
    );
}

/// The scanner itself: it must see a tool wherever a script can call one,
/// or the check above passes on a script it cannot read.
#[test]
fn the_scanner_finds_commands_wherever_they_run() {
    let text = r#"
foo --flag
X=1 bar baz
a=$(qux -n) && quux || corge; grault | garply
if waldo; then fred; fi
echo "text $(plugh x) more" 'thud $(not) here'
case $x in
  one) xyzzy ;;
  # a comment) in a case
esac
case $y in two) continue ;; esac
bar2 # after a one-line case, it's
LIST='
notacommand2 x
'
"$dir"/x && baz2 \
  notacommand3
setsid zork arg >"$log" 2>&1 &
cat <<EOF
notacommand here
EOF
((i = 0; i < 3; i++))
# commented out
"#;
    let found = commands(&without_heredocs(text));
    for want in [
        "foo", "bar", "qux", "quux", "corge", "grault", "garply", "waldo", "fred", "plugh",
        "xyzzy", "zork", "cat", "echo", "bar2", "baz2",
    ] {
        assert!(found.contains(want), "{want} not found in {found:?}");
    }
    for not in [
        "baz",
        "x",
        "not",
        "notacommand",
        "commented",
        "i",
        "one",
        "arg",
        "text",
        "in",
        "two",
        "notacommand2",
        "notacommand3",
    ] {
        assert!(
            !found.contains(not),
            "{not} taken for a command in {found:?}"
        );
    }
}
