-- batond's tick keeps what it last read of each live chain's jobs, submissions and checkpoints (the end
-- of training, the newest one), and reads them again only for the chains whose rows changed since. Every statement that changes
-- such rows counts up their chains' revision in its own transaction, whoever runs it (batond, batonctl,
-- an operator's SQL), so a revision the tick has seen before means rows it has read before.
ALTER TABLE chains ADD COLUMN revision bigint NOT NULL DEFAULT 0;

CREATE FUNCTION count_chain_revisions() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- changed_rows: the statement's new rows (insert, update) or old ones (delete).
    UPDATE chains SET revision = revision + 1 WHERE id IN (SELECT chain_id FROM changed_rows);
    RETURN NULL;
END
$$;

-- Statement triggers: a batch of rows costs one update of each of its chains. A trigger with transition
-- tables takes one event, hence three per table.
CREATE TRIGGER jobs_inserted AFTER INSERT ON jobs REFERENCING NEW TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_chain_revisions();
CREATE TRIGGER jobs_updated AFTER UPDATE ON jobs REFERENCING NEW TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_chain_revisions();
CREATE TRIGGER jobs_deleted AFTER DELETE ON jobs REFERENCING OLD TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_chain_revisions();
CREATE TRIGGER submissions_inserted AFTER INSERT ON submissions REFERENCING NEW TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_chain_revisions();
CREATE TRIGGER submissions_updated AFTER UPDATE ON submissions REFERENCING NEW TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_chain_revisions();
CREATE TRIGGER submissions_deleted AFTER DELETE ON submissions REFERENCING OLD TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_chain_revisions();
CREATE TRIGGER checkpoints_inserted AFTER INSERT ON checkpoints REFERENCING NEW TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_chain_revisions();
CREATE TRIGGER checkpoints_updated AFTER UPDATE ON checkpoints REFERENCING NEW TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_chain_revisions();
CREATE TRIGGER checkpoints_deleted AFTER DELETE ON checkpoints REFERENCING OLD TABLE AS changed_rows
    FOR EACH STATEMENT EXECUTE FUNCTION count_chain_revisions();
