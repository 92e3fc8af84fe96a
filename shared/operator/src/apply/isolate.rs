//! Per-object failure isolation. An apply the API server refuses because of
//! the object's live state, not because of what we want (a user changed a
//! managed Service's port, so our port and theirs now share a name), is
//! fixed by recreating the object from the desired state; it never blocks
//! the rest of the component. Whether a refusal is the live state's fault is
//! asked of the server: a dry-run create of the desired object alone passes
//! validation and fails only because the name exists.

use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, PostParams};

use super::{ApplyError, Engine, Planned, describe};

/// How long a recreate waits for the old object to go.
const GONE_TIMEOUT: Duration = Duration::from_secs(10);

impl Engine {
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
            return self.patch(p, false).await;
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
                return Err(ApplyError::CrdNotEstablished(
                    format!("{} (still deleting, to be recreated)", describe(&p.desired)),
                    GONE_TIMEOUT,
                ));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        self.patch(p, false).await
    }
}
