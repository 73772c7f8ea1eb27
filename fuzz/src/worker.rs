//! The worker: a process that runs cases read from stdin, one line each, and answers each with
//! `ok <outcome>` on stdout. A panic anywhere in it (any thread, a tokio task included) prints
//! `panic <message>` and ends the process; an abort or a hang ends it some other way. Either
//! way the driver sees which case did it, because a worker runs one case at a time.

use std::io::{BufRead, Write};
use std::sync::Mutex;

use crate::case::Case;
use crate::exec::Runner;

static STDOUT: Mutex<()> = Mutex::new(());

fn say(line: &str) {
    let _guard = STDOUT.lock().unwrap_or_else(|p| p.into_inner());
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// Caps the process's address space, so that an allocation no budget checked fails here (an
/// abort the driver reports) instead of exhausting the machine.
/// A cap already lower (`ulimit -v`) stays: raising it is not allowed, and not wanted.
pub fn cap_memory(bytes: u64) -> std::io::Result<()> {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let bytes = getrlimit(Resource::As)
        .maximum
        .map_or(bytes, |m| m.min(bytes));
    setrlimit(
        Resource::As,
        Rlimit {
            current: Some(bytes),
            maximum: Some(bytes),
        },
    )
    .map_err(std::io::Error::from)
}

/// Serves cases until stdin closes.
pub fn serve(mut runner: Runner) -> std::io::Result<()> {
    std::panic::set_hook(Box::new(|info| {
        let place = info
            .location()
            .map(|l| format!(" at {}:{}", l.file(), l.line()))
            .unwrap_or_default();
        let message = info
            .payload()
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| info.payload().downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "(no message)".into());
        let message = message.replace('\n', " ");
        say(&format!("panic {message}{place}"));
        std::process::exit(101);
    }));
    say("ready");
    for line in std::io::stdin().lock().lines() {
        let line = line?;
        let Some(case) = Case::from_line(&line) else {
            say("ok unreadable case");
            continue;
        };
        let outcome = runner.run(&case).replace('\n', " ");
        say(&format!("ok {outcome}"));
    }
    Ok(())
}
