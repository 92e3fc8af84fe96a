//! One install of the demo (the chart in `kubeflow-system`, the fifteen
//! operators as its ServiceAccounts) and every flow that needs nothing but
//! an installed Kubeflow, in turn on it: the install as a user meets it at
//! 26.03 and the demo's wait (`first_install`); a person's day in their
//! profile namespace, each object run by its upstream controller
//! (`persons_day`); the upgrade to 26.03.1 with users' objects (`upgrade`),
//! the person's among them; the operators' reach, tried as an attacker
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
mod persons_day;
mod powerful_accounts;
mod reach;
mod upgrade;

use kubeflow_e2e::component::{ALL_COMPONENTS, ALL_KINDS, prepare};
use kubeflow_e2e::demo::{Demo, clear_leftovers};

#[tokio::test]
async fn one_installed_demo_holds_its_upgrade_reach_monitoring_mirror_and_deletion() {
    let (monitor, rules) = monitoring::rules_checked();
    let (client, mut phases) = prepare(&ALL_KINDS, &ALL_COMPONENTS).await;
    clear_leftovers(&client).await;
    phases.phase("promtool on the alerts, sweep");
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
    phases.phase("install at 26.03");
    first_install::check(&client, &demo, &printed).await;
    phases.phase("first install");
    first_install::stall(&client, &demo).await;
    phases.phase("the wait's stall");
    let day = persons_day::check(&client).await;
    phases.phase("a person's day");
    upgrade::check(&client, &demo).await;
    phases.phase("upgrade to 26.03.1");
    persons_day::after_upgrade(&client, day).await;
    phases.phase("the person's objects after the upgrade");
    reach::check(&client, &demo).await;
    powerful_accounts::check(&client).await;
    phases.phase("reach");
    monitoring::check(&client, &demo, &monitor, &rules).await;
    phases.phase("monitoring");
    contributors::check(&client).await;
    phases.phase("contributors");
    conformance::check(&client, &demo).await;
    phases.phase("conformance");
    mirror::check(&client).await;
    phases.phase("mirror");
    component_removal::check(&client).await;
    phases.phase("one component removed");
    namespace_deletion::check(&client, demo).await;
    phases.phase("namespace deletion and teardown");
}
