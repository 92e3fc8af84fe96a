//! A MySQL-compatible database (Debian's MariaDB) as a process on loopback,
//! set up as the Pipelines bundle's MySQL starts with upstream's demo
//! settings: `root` from anywhere, no password. It stands for the data an
//! install holds, so a test can tell whether what the operators do keeps
//! it readable. Stopped by its recorded pid when dropped; its folder goes
//! with it.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The server, its folder and its port.
pub struct LocalDatabase {
    child: Child,
    dir: PathBuf,
    /// The loopback port it listens on.
    pub port: u16,
}

impl LocalDatabase {
    /// Initialises an empty data folder and starts the server on a free
    /// loopback port, with upstream's demo accounts: `root`@`%` and
    /// `root`@`localhost`, both without a password (MariaDB's own extra
    /// `root` accounts are dropped so the accounts are the MySQL image's).
    pub fn start(name: &str) -> Self {
        let dir = crate::operator::target_dir()
            .join("e2e-databases")
            .join(format!("{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("database folder");
        let data = dir.join("data");
        let out = Command::new("mariadb-install-db")
            .args(["--no-defaults", "--skip-test-db", "--user=root"])
            .arg("--auth-root-authentication-method=normal")
            .arg(format!("--datadir={}", data.display()))
            .output()
            .expect("mariadb-install-db (Debian's mariadb-server-core)");
        assert!(
            out.status.success(),
            "mariadb-install-db: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let port = crate::operator::free_port();
        let log = std::fs::File::create(dir.join("server.log")).expect("log");
        let child = Command::new("mariadbd")
            .args(["--no-defaults", "--user=root", "--skip-name-resolve"])
            .arg("--bind-address=127.0.0.1")
            .arg(format!("--port={port}"))
            .arg(format!("--datadir={}", data.display()))
            .arg(format!("--socket={}", dir.join("socket").display()))
            .arg(format!("--pid-file={}", dir.join("pid").display()))
            .stdin(Stdio::null())
            .stdout(Stdio::from(log.try_clone().expect("log")))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("mariadbd (Debian's mariadb-server-core)");
        let db = LocalDatabase { child, dir, port };
        let deadline = Instant::now() + Duration::from_secs(30);
        while db.query("", "SELECT 1").is_err() {
            assert!(Instant::now() < deadline, "the database did not start");
            std::thread::sleep(Duration::from_millis(100));
        }
        // Connections from 127.0.0.1 then match `root`@`%`, as pods' do.
        db.query(
            "",
            "DROP USER IF EXISTS 'root'@'127.0.0.1', 'root'@'::1'; \
             CREATE USER 'root'@'%'; GRANT ALL ON *.* TO 'root'@'%' WITH GRANT OPTION; \
             DELETE FROM mysql.global_priv WHERE User = 'root' AND Host NOT IN ('%', 'localhost'); \
             FLUSH PRIVILEGES",
        )
        .expect("the demo accounts");
        db
    }

    /// Runs `sql` as `root` with `password` over TCP; the output, or the
    /// client's error.
    pub fn query(&self, password: &str, sql: &str) -> Result<String, String> {
        let out = Command::new("mysql")
            .args([
                "--protocol=TCP",
                "-h",
                "127.0.0.1",
                "-u",
                "root",
                "-N",
                "-B",
            ])
            .arg(format!("-P{}", self.port))
            .arg(format!("--password={password}"))
            .args(["-e", sql])
            .output()
            .map_err(|e| format!("mysql (Debian's mariadb-client-core): {e}"))?;
        if out.status.success() {
            Ok(String::from_utf8_lossy(&out.stdout).into_owned())
        } else {
            Err(String::from_utf8_lossy(&out.stderr).into_owned())
        }
    }
}

impl Drop for LocalDatabase {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
