//! Prints the bcrypt hash (cost 10) of the password read from standard
//! input, for a users Secret of the Auth component: what `e2e/demo` makes
//! its user's random password into. `htpasswd -nbBC 10 "" PASSWORD | cut
//! -d: -f2` gives the same form where Apache's tools are installed.

use std::io::Read;

fn main() -> anyhow::Result<()> {
    let mut password = String::new();
    std::io::stdin().read_to_string(&mut password)?;
    let password = password.trim_end_matches(['\n', '\r']);
    anyhow::ensure!(!password.is_empty(), "no password on standard input");
    let user = kubeflow_e2e::login::TestUser {
        email: String::new(),
        password: password.to_string(),
    };
    println!("{}", user.hash());
    Ok(())
}
