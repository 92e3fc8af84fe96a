//! Per-object failure isolation. An apply the API server refuses because of
//! the object's live state, not because of what we want (a user changed a
//! managed Service's port, so our port and theirs now share a name), never
//! blocks the rest of the component. Whether a refusal is the live state's
//! fault is asked of the server: a dry-run create of the desired object
//! alone passes validation and fails only because the name exists. Such an
//! object is recreated from the desired state when its kind holds nothing
//! but what is rendered, and otherwise kept as it is and reported (see
//! `recreation`): a volume, a namespace or a CRD is never deleted to repair it.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};

use super::plan::Planned;
use super::recreation::{self, Held, OnRefusal};
use super::{ApplyError, CONCURRENCY, Engine, ObjectKey, describe};

/// How long a recreate waits for the old object to go.
const GONE_TIMEOUT: Duration = Duration::from_secs(10);

/// What the dry runs found about objects whose live state refuses the
/// desired one.
#[derive(Default)]
pub(super) struct Isolation {
    /// To delete and create anew, with the API server's refusal.
    pub(super) recreate: BTreeMap<ObjectKey, String>,
    /// To leave as they are, and report.
    pub(super) held: BTreeMap<ObjectKey, Held>,
}

impl Engine {
    /// Dry-runs every write. An object refused as invalid that is valid on
    /// its own is to be recreated or held (see `recreation`); any other
    /// refusal refuses the whole apply, so invalid input changes nothing.
    /// `retained`: whether the component keeps an object beyond its life.
    pub(super) async fn dry_run_all(
        &self,
        items: Vec<&Planned>,
        retained: &(dyn Fn(&kube::api::DynamicObject) -> bool + Send + Sync),
    ) -> Result<Isolation, ApplyError> {
        // Bounded concurrency by hand: a `stream::iter(..).map(async ..)` over
        // borrowed items is not provably Send in the controller's future.
        let mut results: Vec<(&Planned, Result<(), ApplyError>)> = Vec::new();
        let mut in_flight = futures::stream::FuturesUnordered::new();
        for p in items {
            in_flight.push(async move { (p, self.dry_run(p).await) });
            if in_flight.len() >= CONCURRENCY
                && let Some(r) = in_flight.next().await
            {
                results.push(r);
            }
        }
        while let Some(r) = in_flight.next().await {
            results.push(r);
        }
        let mut isolation = Isolation::default();
        for (p, r) in results {
            match r {
                Ok(_) => {}
                Err(ApplyError::Invalid { object, message }) => {
                    let Some(live) = p.live.as_ref() else {
                        return Err(ApplyError::Invalid { object, message });
                    };
                    if !self.valid_alone(p).await? {
                        return Err(ApplyError::Invalid { object, message });
                    }
                    match recreation::on_refusal(&p.desired, live, retained(&p.desired)) {
                        OnRefusal::Recreate => {
                            tracing::warn!(object, error = %message, "the live object cannot take the desired state; it will be recreated");
                            isolation
                                .recreate
                                .insert(p.key(), recreation::bounded(&message));
                        }
                        OnRefusal::Keep(holds) => {
                            tracing::warn!(object, error = %message, "the live object cannot take the desired state; it is kept as it is");
                            isolation
                                .held
                                .insert(p.key(), Held::new(p.key(), &message, holds));
                        }
                    }
                }
                // A policy of the cluster refused the write: never a reason
                // to recreate (the policy would be bypassed); an object that
                // holds data is kept and reported as for any refusal, the rest
                // fails the apply naming the policy.
                Err(ApplyError::Admission { object, message }) => {
                    let kept = p.live.as_ref().and_then(|live| {
                        match recreation::on_refusal(&p.desired, live, retained(&p.desired)) {
                            OnRefusal::Keep(holds) => Some(holds),
                            OnRefusal::Recreate => None,
                        }
                    });
                    let Some(holds) = kept else {
                        return Err(ApplyError::Admission { object, message });
                    };
                    tracing::warn!(object, error = %message, "a policy refuses the desired state; the object is kept as it is");
                    isolation
                        .held
                        .insert(p.key(), Held::new(p.key(), &message, holds));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(isolation)
    }

    /// Whether `p`, refused as invalid, is valid on its own: then its live
    /// state is at fault and recreating it repairs it.
    pub(super) async fn valid_alone(&self, p: &Planned) -> Result<bool, ApplyError> {
        let (Some(resolved), Some(_)) = (&p.resolved, &p.live) else {
            return Ok(false);
        };
        let api = self.api(resolved, p.desired.metadata.namespace.as_deref());
        let params = PostParams {
            dry_run: true,
            field_manager: Some(self.manager.clone()),
        };
        match api.create(&params, &p.desired).await {
            // Validation passed; only the name is taken.
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(true),
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 422 || e.code == 400 => Ok(false),
            Err(source) => Err(ApplyError::Api {
                verb: "dry-run create",
                object: describe(&p.desired),
                source,
            }),
        }
    }

    /// Deletes the live object, waits until it is gone, and applies the
    /// desired one in its place.
    pub(super) async fn recreate(&self, p: &Planned) -> Result<DynamicObject, ApplyError> {
        let Some(resolved) = &p.resolved else {
            return self.patch(p).await;
        };
        let api: Api<DynamicObject> = self.api(resolved, p.desired.metadata.namespace.as_deref());
        let name = p.desired.metadata.name.as_deref().unwrap_or("");
        let old_uid = p.live.as_ref().and_then(|l| l.metadata.uid.clone());
        match api.delete(name, &DeleteParams::foreground()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(source) => {
                return Err(ApplyError::Api {
                    verb: "delete (to recreate)",
                    object: describe(&p.desired),
                    source,
                });
            }
        }
        let deadline = tokio::time::Instant::now() + GONE_TIMEOUT;
        loop {
            let live = api.get_opt(name).await.map_err(|source| ApplyError::Api {
                verb: "get",
                object: describe(&p.desired),
                source,
            })?;
            if live.is_none_or(|l| l.metadata.uid != old_uid) {
                break;
            }
            if tokio::time::Instant::now() > deadline {
                return Err(ApplyError::Timeout {
                    what: format!("{} to be deleted (to be recreated)", describe(&p.desired)),
                    after: GONE_TIMEOUT,
                });
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.patch(p).await
    }
}
