//! One install of the demo (the chart in `kubeflow-system`, the fifteen
//! operators as its ServiceAccounts) and every flow that needs nothing but
//! an installed Kubeflow, in turn on it: the install as a user meets it at
//! 26.03 and the demo's wait (`first_install`); the upgrade to 26.03.1 with
//! users' objects (`upgrade`); the operators' reach, tried as an attacker
//! would (`reach`); the chart's alerts and dashboards against a real
//! Prometheus (`monitoring`); declared contributors through the `Kubeflow`
//! resource (`contributors`); what every component promises, for each
//! one of the registry (`conformance`); the move to a mirror registry and image
//! digests (`mirror`); one component removed alone (`component_removal`);
//! and, last because it ends the install, the deletion of the `kubeflow`
//! namespace and the chart's uninstall (`namespace_deletion`). Each was a
//! binary with an install of its own (the demo's path one more, with an
//! install and an upgrade): one install instead of six is most of their
//! time saved.
//!
//! The order matters: `upgrade` needs the install at 26.03, and the flows
//! after it run at 26.03.1; those up to `contributors` leave the install as
//! they found it (what they break they wait to see repaired); `mirror`
//! leaves every image moved, which the last ones look at no more. A failure
//! names its flow in the panic's location (the module's file) and in the
//! phase lines printed to standard error as each one ends.

mod component_removal;
mod conformance;
mod contributors;
mod first_install;
mod mirror;
mod monitoring;
mod namespace_deletion;
mod reach;
mod upgrade;

use std::io::Write;
use std::time::Instant;

use kubeflow_e2e::component::{ALL_COMPONENTS, ALL_KINDS, prepare};
use kubeflow_e2e::demo::{Demo, clear_leftovers};

/// Times each phase and prints it as it ends, past the test harness's
/// capture (written to the process's standard error, not through
/// `eprintln!`), so a passing run shows where its time went too.
struct Phases {
    start: Instant,
    last: Instant,
}

impl Phases {
    fn new() -> Phases {
        let now = Instant::now();
        Phases {
            start: now,
            last: now,
        }
    }

    fn done(&mut self, phase: &str) {
        let now = Instant::now();
        let _ = writeln!(
            std::io::stderr().lock(),
            "[installed] {phase}: {:.0} s (at {:.0} s)",
            (now - self.last).as_secs_f64(),
            (now - self.start).as_secs_f64()
        );
        self.last = now;
    }
}

#[tokio::test]
async fn one_installed_demo_holds_its_upgrade_reach_monitoring_mirror_and_deletion() {
    let mut phases = Phases::new();
    let (monitor, rules) = monitoring::rules_checked();
    phases.done("monitoring rules checked by promtool");
    let (client, _g) = prepare(&ALL_KINDS, &ALL_COMPONENTS).await;
    clear_leftovers(&client).await;
    phases.done("sweep");
    // The mirror `mirror` moves the install to, listed in the chart as a
    // platform team would list theirs (the admission pins admit the
    // bundles' images under it).
    let (demo, printed) = Demo::up_with_env(
        "installed",
        16600,
        "processes",
        &[
            ("KUBEFLOW_DEMO_RELEASE", "26.03"),
            ("KUBEFLOW_DEMO_IMAGE_MIRRORS", mirror::MIRROR),
        ],
    );
    phases.done("install at 26.03");
    first_install::check(&client, &demo, &printed).await;
    phases.done("first install");
    first_install::stall(&client, &demo).await;
    phases.done("the wait's stall");
    upgrade::check(&client, &demo).await;
    phases.done("upgrade to 26.03.1");
    reach::check(&client, &demo).await;
    phases.done("reach");
    monitoring::check(&client, &demo, &monitor, &rules).await;
    phases.done("monitoring");
    contributors::check(&client).await;
    phases.done("contributors");
    conformance::check(&client, &demo).await;
    phases.done("conformance");
    mirror::check(&client).await;
    phases.done("mirror");
    component_removal::check(&client).await;
    phases.done("one component removed");
    namespace_deletion::check(&client, demo).await;
    phases.done("namespace deletion and teardown");
}
