//! This test binary run again as a child process, one test selected by name, under an
//! address-space limit and a timeout: for what a process reads once (the emulator's environment,
//! the tuning table) or what limits a whole process (`RLIMIT_AS`).
use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// What a child did: its exit code (`None`: killed by a signal, `signal` says which) and output.
pub struct Outcome {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub timed_out: bool,
    pub elapsed: Duration,
    pub stdout: String,
    pub stderr: String,
}

impl Outcome {
    pub fn text(&self) -> String {
        format!(
            "exit code {:?}, signal {:?}{} after {:?}\n--- stdout\n{}\n--- stderr\n{}",
            self.code,
            self.signal,
            if self.timed_out { " (timed out, killed)" } else { "" },
            self.elapsed,
            self.stdout,
            self.stderr
        )
    }

    /// Exited by itself with status 0 (the child's assertions passed): not a signal, not a hang.
    pub fn assert_clean(&self, what: &str) {
        assert!(
            !self.timed_out && self.signal.is_none() && self.code == Some(0),
            "{what}: the child did not exit cleanly: {}",
            self.text()
        );
    }

    /// The rest of the first stdout line after `tag` (e.g. "RESULT ").
    pub fn line_after(&self, tag: &str) -> Option<&str> {
        self.stdout.lines().find_map(|l| l.split_once(tag).map(|(_, r)| r))
    }
}

/// This binary, to run its test `test` alone (with its output).
pub fn this_test(test: &str) -> Command {
    let mut cmd = Command::new(std::env::current_exe().expect("the test binary"));
    cmd.args(["--exact", test, "--nocapture", "--test-threads=1"]);
    cmd
}

/// Sets this process's address-space limit (`RLIMIT_AS`); false when refused.
#[cfg(target_os = "linux")]
pub fn set_address_space_limit(bytes: u64) -> bool {
    extern "C" {
        fn setrlimit(resource: i32, rlim: *const [u64; 2]) -> i32;
    }
    const RLIMIT_AS: i32 = 9;
    let lim = [bytes, bytes];
    // SAFETY: two u64s as struct rlimit; affects only this process.
    unsafe { setrlimit(RLIMIT_AS, &lim) == 0 }
}

#[cfg(not(target_os = "linux"))]
pub fn set_address_space_limit(_: u64) -> bool {
    true
}

/// Runs `cmd` with an address-space limit of `limit` bytes (when given), stdin closed and the
/// output captured, killed after `timeout`.
pub fn run(mut cmd: Command, limit: Option<u64>, timeout: Duration) -> Outcome {
    #[cfg(target_os = "linux")]
    if let Some(bytes) = limit {
        use std::os::unix::process::CommandExt;
        // SAFETY: setrlimit is async-signal-safe and only touches the forked child.
        unsafe {
            cmd.pre_exec(move || {
                if set_address_space_limit(bytes) {
                    Ok(())
                } else {
                    Err(std::io::Error::last_os_error())
                }
            });
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = limit;
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    let start = Instant::now();
    let mut proc = cmd.spawn().expect("spawn the child");
    let drain = |mut r: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut s = Vec::new();
            r.read_to_end(&mut s).ok();
            String::from_utf8_lossy(&s).into_owned()
        })
    };
    let t_out = drain(Box::new(proc.stdout.take().expect("stdout")));
    let t_err = drain(Box::new(proc.stderr.take().expect("stderr")));
    let (status, timed_out) = loop {
        if let Some(s) = proc.try_wait().expect("wait") {
            break (s, false);
        }
        if start.elapsed() > timeout {
            proc.kill().ok();
            break (proc.wait().expect("wait"), true);
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    #[cfg(unix)]
    let signal = std::os::unix::process::ExitStatusExt::signal(&status);
    #[cfg(not(unix))]
    let signal = None;
    Outcome {
        code: status.code(),
        signal,
        timed_out,
        elapsed: start.elapsed(),
        stdout: t_out.join().expect("stdout reader"),
        stderr: t_err.join().expect("stderr reader"),
    }
}

/// `VmSize`, `VmPeak` (or another field) of this process from /proc/self/status, in bytes.
pub fn vm(field: &str) -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with(field))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}
