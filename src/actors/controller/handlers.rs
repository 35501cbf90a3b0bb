//! The controller's message handlers: registration, requests, reports, snapshots, drain.

use super::*;

impl Controller {
    /// Registers a model while serving, through the one registry.
    fn register(&mut self, message: RegisterModel) -> Result<ModelId, RegisterError> {
        let candidate = Candidate {
            spec: message.spec,
            bytes: message.bytes,
            prepared: message.prepared,
            profiles: message.profiles,
            backends: message.backends,
        };
        let model = self
            .parts
            .registry
            .register(self.parts.policy.as_mut(), candidate)?;
        tracing::info!(model = %model.name(), id = model.id.0, "model registered while serving");
        Ok(model.id)
    }
}

impl Handler<RegisterModel> for Controller {
    type Result = Result<ModelId, RegisterError>;

    fn handle(&mut self, message: RegisterModel, ctx: &mut Context<Self>) -> Self::Result {
        let registered = self.register(message);
        // The policy may place the new model at once (loaded while memory allows).
        self.step(ctx);
        registered
    }
}

impl Actor for Controller {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        // Requests are admitted or refused by the policy, not held back by a small mailbox.
        ctx.set_mailbox_capacity(crate::actors::MAILBOX);
        // The policy places registered models before any request (loaded while memory
        // allows), so that a model reported ready is servable.
        self.step(ctx);
    }
}

impl Handler<Infer> for Controller {
    type Result = ResponseFuture<InferResult>;

    fn handle(&mut self, infer: Infer, ctx: &mut Context<Self>) -> Self::Result {
        let (reply, answer) = oneshot::channel();
        let submit = Submit {
            model: infer.model,
            inputs: Arc::new(infer.inputs),
            items: infer.items,
            slo: infer.slo,
            edge: infer.edge,
            root: infer.root,
            tally: None,
            reply,
        };
        self.admit(submit, ctx);
        Box::pin(async move { answer.await.unwrap_or(Err(InferError::ShuttingDown)) })
    }
}

impl Handler<Submit> for Controller {
    type Result = ();

    fn handle(&mut self, submit: Submit, ctx: &mut Context<Self>) {
        self.admit(submit, ctx);
    }
}

impl Handler<Withdraw> for Controller {
    type Result = ();

    fn handle(&mut self, withdraw: Withdraw, ctx: &mut Context<Self>) {
        let Some(requests) = self.groups.remove(&withdraw.group) else {
            return;
        };
        for request in requests {
            if let Some(pending) = self.pending.get(&request) {
                let model = pending.model;
                self.touched.push(model);
                self.parts.policy.withdraw(request, model, &mut self.plan);
            }
        }
        self.step(ctx);
    }
}

impl Handler<SetReplicaFloor> for Controller {
    type Result = ();

    fn handle(&mut self, floor: SetReplicaFloor, ctx: &mut Context<Self>) {
        let Some(model) = self.parts.registry.catalog().id(&floor.model) else {
            return;
        };
        self.parts.policy.set_replica_floor(model, floor.replicas);
        self.step(ctx);
    }
}

impl Handler<ActionReport> for Controller {
    type Result = ();

    fn handle(&mut self, report: ActionReport, ctx: &mut Context<Self>) {
        self.report(report, ctx);
    }
}

impl Handler<SnapshotController> for Controller {
    type Result = MessageResult<SnapshotController>;

    fn handle(&mut self, _: SnapshotController, _: &mut Context<Self>) -> Self::Result {
        let now = self.now();
        MessageResult(ControllerSnapshot {
            now,
            pending: self.pending.len(),
            admitted: self.admitted,
            answered: self.answered,
            steps: self.steps,
            draining: self.draining,
            waiting_for_devices: self.live_devices < self.parts.settings.wait_for_devices,
            policy: self.parts.policy.snapshot(now),
        })
    }
}

impl Handler<Drain> for Controller {
    type Result = ResponseFuture<()>;

    fn handle(&mut self, _: Drain, ctx: &mut Context<Self>) -> Self::Result {
        self.draining = true;
        let deadline = self
            .now()
            .saturating_add(self.parts.settings.shutdown_grace);
        self.drain_deadline = Some(self.drain_deadline.map_or(deadline, |d| d.min(deadline)));
        self.arm(ctx);
        let (done, drained) = oneshot::channel();
        if self.pending.is_empty() {
            let _ = done.send(());
        } else {
            self.drained.push(done);
        }
        Box::pin(async move {
            let _ = drained.await;
        })
    }
}
