-- A chain may name its own provisioning policy (`batonctl submit --policy`, `batonctl policy`); a chain
-- without one follows the service's configured policy, whatever that is at the time.
ALTER TABLE chains ADD COLUMN policy text
    CHECK (policy IN ('reactive', 'avg', 'predict', 'checkpoint-aware'));

-- A user's change of it is recorded with the chain's decisions.
ALTER TABLE decisions DROP CONSTRAINT decisions_action_check;
ALTER TABLE decisions ADD CONSTRAINT decisions_action_check CHECK (action IN
    ('wait', 'submit', 'handover', 'cancel', 'preempt', 'pause', 'resume', 'resubmit', 'finish', 'fail', 'retry',
     'quarantine', 'withdrawn', 'policy'));
