//! Writing: objects in waves (namespaces and CRDs first, webhooks last),
//! each wave concurrently, the CRDs of wave 1 waited for until Established
//! before the custom resources that need them. One object's passing failure
//! does not stop the others; the first failure is returned at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::{StreamExt, stream};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, PatchParams};
use kube::runtime::wait::{await_condition, conditions};

use super::fields::{foreign_meaning_labels, skip_reconcile};
use super::memo::slim;
use super::plan::{Decisions, Planned};
use super::responses;
use super::{ApplyError, ApplyOutcome, CONCURRENCY, Engine, ObjectKey, classify, describe, diff};
use crate::base::kinds::{self, kind};

/// How long to wait for an applied CRD to become Established.
const CRD_ESTABLISH_TIMEOUT: Duration = Duration::from_secs(60);
/// The wave of CRDs (see `kinds::apply_wave`).
const CRD_WAVE: u8 = 1;
/// How long a custom resource's write waits for its CRD's new schema.
const SCHEMA_SETTLE_TIMEOUT: Duration = Duration::from_secs(15);

/// Whether the API server refused a write because the object's CRD schema
/// it serves lags the one just written.
fn schema_not_yet_served(e: &ApplyError) -> bool {
    matches!(
        e,
        ApplyError::Api { source: kube::Error::Api(s), .. }
            if s.code == 500 && s.message.contains("field not declared in schema")
    )
}

impl Engine {
    /// Applies the planned objects wave by wave and records what happened in
    /// `outcome`; returns the keys of every object now applied.
    pub(super) async fn apply_waves(
        &self,
        planned: Vec<Planned>,
        decisions: &Decisions,
        outcome: &mut ApplyOutcome,
    ) -> Result<BTreeSet<ObjectKey>, ApplyError> {
        let mut waves: BTreeMap<u8, Vec<Planned>> = BTreeMap::new();
        for p in planned {
            waves
                .entry(kinds::apply_wave(&p.desired))
                .or_default()
                .push(p);
        }
        let mut applied = BTreeSet::new();
        let mut first_failure: Option<ApplyError> = None;
        for (wave, items) in waves {
            let results: Vec<Result<(Planned, Option<DynamicObject>), ApplyError>> =
                stream::iter(items.into_iter().map(|p| async move {
                    let result = self.apply_one(p, decisions).await;
                    // In the status now, not once the rest of the pass is done.
                    if let Err(e) = &result {
                        super::early::report(e);
                    }
                    result
                }))
                .buffer_unordered(CONCURRENCY)
                .collect()
                .await;
            for r in results {
                match r {
                    Ok((p, written)) => {
                        applied.insert(p.key());
                        record(outcome, &p, written, decisions);
                    }
                    Err(e) => {
                        let error = crate::base::errors::chain(&e);
                        tracing::warn!(%error, "an object failed; applying the others");
                        first_failure.get_or_insert(e);
                    }
                }
            }
            if wave == CRD_WAVE {
                self.wait_established(&outcome.live).await?;
            }
        }
        // Nothing is pruned after a failure: what failed may be what a prune
        // would judge no longer rendered.
        match first_failure {
            Some(e) => Err(e),
            None => Ok(applied),
        }
    }

    /// Writes one object if it must be (resolving its kind first when its CRD
    /// came in an earlier wave); returns the object written, if any.
    async fn apply_one(
        &self,
        mut p: Planned,
        decisions: &Decisions,
    ) -> Result<(Planned, Option<DynamicObject>), ApplyError> {
        if p.resolved.is_none() {
            let resolved = self
                .resolver
                .resolve(&self.client, &p.desired)
                .await
                .map_err(|source| ApplyError::Api {
                    verb: "resolve the kind of",
                    object: describe(&p.desired),
                    source,
                })?;
            p.live = self.get_live(&resolved, &p.desired).await?;
            p.resolved = Some(resolved);
        }
        if p.live.as_ref().is_some_and(skip_reconcile) || !decisions.needs_write(&p) {
            return Ok((p, None));
        }
        let recreate = decisions.recreate.contains_key(&p.key());
        if !recreate && !p.remove.is_empty() {
            self.remove_fields(&p).await?;
        }
        let written = if recreate {
            self.recreate(&p).await?
        } else {
            self.patch_as_schema_settles(&p).await?
        };
        let written = match p.live.as_ref() {
            Some(live) => {
                let foreign = foreign_meaning_labels(&p.desired, live);
                if foreign.is_empty() {
                    written
                } else {
                    self.remove_labels(&p, &foreign).await?
                }
            }
            None => written,
        };
        Ok((p, Some(written)))
    }

    /// Removes fields another manager added where the object is enforced
    /// whole (server-side apply cannot: they are not ours), by a JSON patch
    /// that first tests the resourceVersion they were found at: a change in
    /// between fails it, and the next reconcile (the watch brings it) looks
    /// again.
    async fn remove_fields(&self, p: &Planned) -> Result<(), ApplyError> {
        let (Some(resolved), Some(live)) = (&p.resolved, &p.live) else {
            return Ok(());
        };
        let mut ops = vec![serde_json::json!({
            "op": "test",
            "path": "/metadata/resourceVersion",
            "value": live.metadata.resource_version,
        })];
        ops.extend(
            p.remove
                .iter()
                .map(|path| serde_json::json!({"op": "remove", "path": path})),
        );
        let patch: json_patch::Patch = serde_json::from_value(serde_json::Value::Array(ops))
            .map_err(|e| ApplyError::Api {
                verb: "remove fields of",
                object: describe(&p.desired),
                source: kube::Error::SerdeError(e),
            })?;
        let params = PatchParams {
            field_manager: Some(self.manager.clone()),
            ..PatchParams::default()
        };
        let name = p.desired.metadata.name.as_deref().unwrap_or("");
        tracing::info!(object = %describe(&p.desired), fields = ?p.remove, "removing fields another manager added");
        self.api(resolved, p.desired.metadata.namespace.as_deref())
            .patch(name, &params, &kube::api::Patch::<()>::Json(patch))
            .await
            .map(|_| ())
            // Never the input's fault: the object changed under the patch.
            .map_err(|source| ApplyError::Api {
                verb: "remove fields of",
                object: describe(&p.desired),
                source,
            })
    }

    /// Removes labels another manager added (server-side apply cannot: they
    /// are not ours); a merge patch under our field manager.
    async fn remove_labels(
        &self,
        p: &Planned,
        keys: &[String],
    ) -> Result<DynamicObject, ApplyError> {
        let Some(resolved) = &p.resolved else {
            return self.patch(p).await;
        };
        let labels: serde_json::Map<String, serde_json::Value> = keys
            .iter()
            .map(|k| (k.clone(), serde_json::Value::Null))
            .collect();
        let patch = serde_json::json!({"metadata": {"labels": labels}});
        let params = PatchParams {
            field_manager: Some(self.manager.clone()),
            ..PatchParams::default()
        };
        let name = p.desired.metadata.name.as_deref().unwrap_or("");
        self.api(resolved, p.desired.metadata.namespace.as_deref())
            .patch(name, &params, &kube::api::Patch::Merge(&patch))
            .await
            .map(|o| slim(&o))
            .map_err(|source| classify("remove labels of", &p.desired, source))
    }

    /// Server-side apply of a custom resource right after its CRD changed:
    /// an Established CRD's new schema reaches the server's apply handler a
    /// moment later, and until then a new field is refused ("field not
    /// declared in schema", a 500). That refusal is retried for a while;
    /// any other answer is final.
    async fn patch_as_schema_settles(&self, p: &Planned) -> Result<DynamicObject, ApplyError> {
        let deadline = tokio::time::Instant::now() + SCHEMA_SETTLE_TIMEOUT;
        loop {
            match self.patch(p).await {
                Err(e) if schema_not_yet_served(&e) && tokio::time::Instant::now() < deadline => {
                    tracing::debug!(object = %describe(&p.desired), "the new schema is not served yet; retrying");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                other => return other,
            }
        }
    }

    /// Server-side apply of the desired object (forced: the operator's field
    /// manager owns what it renders); returns the written object, slim.
    pub(super) async fn patch(&self, p: &Planned) -> Result<DynamicObject, ApplyError> {
        let sent = match self.send(p, false).await {
            Err(e) if e.outcome_unknown() => return self.done_after_all(p, e).await,
            other => other?,
        };
        sent.ok_or_else(|| ApplyError::Invalid {
            object: describe(&p.desired),
            message: "the API server answered the write with no object".into(),
        })
    }

    /// A write that got no verdict (a 504, no answer in time, a lost
    /// connection) may have been done: a loaded server finishes a large
    /// CRD after it stopped waiting for it. The object is read, and if the
    /// fields we own say what was sent, the write stands; otherwise the
    /// failure does, and the next try, after the backoff, reads it again
    /// before sending anything. Never sent again here.
    async fn done_after_all(
        &self,
        p: &Planned,
        failure: ApplyError,
    ) -> Result<DynamicObject, ApplyError> {
        let object = describe(&p.desired);
        let error = crate::base::errors::chain(&failure);
        tracing::warn!(%object, %error, "no verdict on a write; reading it before any resend");
        let Some(resolved) = &p.resolved else {
            return Err(failure);
        };
        let live = match self.read_live(resolved, &p.desired).await {
            Ok(Some(live)) => live,
            Ok(None) => return Err(failure),
            Err(e) => {
                let error = crate::base::errors::chain(&e);
                tracing::warn!(%object, %error, "could not read it after a write without verdict");
                return Err(failure);
            }
        };
        let mut desired = p.desired.clone();
        if let Some(why) = super::fields::with_value(&mut desired, |d| {
            diff::write_reason(d, &live, &self.manager)
        }) {
            tracing::info!(%object, %why, "the write without verdict was not done");
            return Err(failure);
        }
        tracing::info!(%object, "the write without verdict was done; not sent again");
        responses::slim_value(live).map_err(|e| ApplyError::Api {
            verb: "read",
            object,
            source: kube::Error::SerdeError(e),
        })
    }

    /// The server-side apply's dry run: whether the server would take it.
    pub(super) async fn dry_run(&self, p: &Planned) -> Result<(), ApplyError> {
        self.send(p, true).await.map(drop)
    }

    async fn send(&self, p: &Planned, dry_run: bool) -> Result<Option<DynamicObject>, ApplyError> {
        let Some(resolved) = &p.resolved else {
            return Err(ApplyError::Invalid {
                object: describe(&p.desired),
                message: "kind not served".into(),
            });
        };
        let mut params = PatchParams::apply(&self.manager).force();
        params.dry_run = dry_run;
        // Held for this request only: a dry run costs the server as much as
        // the write. A closed semaphore (never closed) would mean no wait.
        let _large = if super::deadline::size_of(&p.desired) >= super::LARGE_WRITE_BYTES {
            self.large_writes.acquire().await.ok()
        } else {
            None
        };
        responses::apply(&self.client, resolved, &p.desired, &params)
            .await
            .map_err(|source| classify("apply", &p.desired, source))
    }

    /// Waits, watching, until every CRD among `live` is Established, all at once.
    async fn wait_established(&self, live: &[DynamicObject]) -> Result<(), ApplyError> {
        let pending: Vec<String> = live
            .iter()
            .filter(|o| {
                kind(o) == "CustomResourceDefinition" && !crate::engine::health::crd_established(o)
            })
            .filter_map(|o| o.metadata.name.clone())
            .collect();
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let waits = pending.iter().map(|name| {
            let api = api.clone();
            async move {
                let established = await_condition(api, name, conditions::is_crd_established());
                match tokio::time::timeout(CRD_ESTABLISH_TIMEOUT, established).await {
                    Ok(Ok(_)) => Ok(()),
                    Ok(Err(e)) => Err(ApplyError::Timeout {
                        what: format!(
                            "CustomResourceDefinition {name} to become Established ({e})"
                        ),
                        after: CRD_ESTABLISH_TIMEOUT,
                    }),
                    Err(_) => Err(ApplyError::Timeout {
                        what: format!("CustomResourceDefinition {name} to become Established"),
                        after: CRD_ESTABLISH_TIMEOUT,
                    }),
                }
            }
        });
        futures::future::try_join_all(waits).await.map(|_| ())
    }
}

/// Records one applied object in the outcome, its live state slimmed (see
/// `memo::slim`): the schemas of a CRD-heavy bundle would otherwise stay
/// in memory until the reconcile ends.
fn record(
    outcome: &mut ApplyOutcome,
    p: &Planned,
    written: Option<DynamicObject>,
    decisions: &Decisions,
) {
    let key = p.key();
    match (&p.live, written) {
        (Some(live), _) if skip_reconcile(live) => {
            outcome.skipped.push(key);
            outcome.live.push(slim(live));
        }
        (Some(_), Some(new)) => {
            if let Some(refusal) = decisions.recreate.get(&key) {
                outcome.why.insert(
                    key.clone(),
                    format!(
                        "recreated: the live object could not take the desired state ({refusal})"
                    ),
                );
                outcome.recreated.push(key.clone());
            } else if let Some(reason) = decisions.why.get(&key) {
                outcome.why.insert(key.clone(), reason.clone());
            }
            outcome.drifted.push(key.clone());
            outcome.written.push(key);
            outcome.live.push(new);
        }
        (None, Some(new)) => {
            outcome.created.push(key.clone());
            outcome.written.push(key);
            outcome.live.push(new);
        }
        (Some(live), None) => outcome.live.push(slim(live)),
        (None, None) => {}
    }
}
