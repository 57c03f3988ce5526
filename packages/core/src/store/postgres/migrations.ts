import { type Kysely, type Migration, type MigrationProvider, sql } from 'kysely';

/**
 * Schema history of the PostgreSQL store; append new migrations, never edit a released one. The
 * tables mirror the SQLite store's (packages/core/src/store/sqlite/migrations.ts) so rows map the same way: time
 * columns are epoch milliseconds (bigint), flags are 0/1 integers, JSON is text, tokens are bytea.
 */
const migrations: Record<string, Migration> = {
  '0001_pool': {
    async up(db: Kysely<unknown>) {
      const statements = [
        `CREATE TABLE meta (key text PRIMARY KEY, value text NOT NULL)`,
        `CREATE TABLE channels (
           name text PRIMARY KEY, config text NOT NULL, created_at bigint NOT NULL, updated_at bigint NOT NULL
         )`,
        // Readiness order across every process: a sequence, not a counter row every writer would lock.
        `CREATE SEQUENCE ready_seq`,
        `CREATE TABLE groups (
           channel text NOT NULL, id text NOT NULL, expected integer,
           n_trajectories integer NOT NULL DEFAULT 0, n_finished integer NOT NULL DEFAULT 0,
           n_complete integer NOT NULL DEFAULT 0, state text NOT NULL, drop_reason text,
           partial integer NOT NULL DEFAULT 0, min_policy_version integer,
           created_at bigint NOT NULL, ready_at bigint, ready_seq bigint, lease_id text, consumed_at bigint,
           seq bigserial, PRIMARY KEY (channel, id)
         )`,
        `CREATE INDEX groups_fifo ON groups (channel, state, ready_seq)`,
        `CREATE INDEX groups_age ON groups (state, created_at)`,
        `CREATE INDEX groups_lease ON groups (lease_id) WHERE lease_id IS NOT NULL`,
        `CREATE TABLE trajectories (
           seq bigserial PRIMARY KEY, id text NOT NULL UNIQUE, channel text NOT NULL, group_id text NOT NULL,
           task_id text, status text NOT NULL, reward double precision, metadata text NOT NULL,
           n_steps integer NOT NULL DEFAULT 0, max_index integer, last_index integer,
           prefix_breaks integer NOT NULL DEFAULT 0, min_policy_version integer,
           counted integer NOT NULL DEFAULT 0, created_at bigint NOT NULL, touched_at bigint NOT NULL,
           completed_at bigint, guided integer NOT NULL DEFAULT 0, guidance_k integer,
           probe integer NOT NULL DEFAULT 0, derived_from text, derivation text
         )`,
        `CREATE INDEX trajectories_group ON trajectories (group_id, channel, status, counted, reward)`,
        `CREATE INDEX trajectories_channel ON trajectories (channel)`,
        `CREATE INDEX trajectories_status ON trajectories (status, channel, reward)`,
        `CREATE INDEX trajectories_reward ON trajectories (channel, reward)`,
        `CREATE INDEX trajectories_task ON trajectories (task_id) WHERE task_id IS NOT NULL`,
        `CREATE INDEX trajectories_idle ON trajectories (channel, touched_at) WHERE status = 'open'`,
        `CREATE INDEX trajectories_gym_run ON trajectories (((metadata::jsonb) ->> 'run_id'))
           WHERE ((metadata::jsonb) ->> 'run_id') IS NOT NULL`,
        // key = trajectory seq * 2^20 + idx, as in SQLite: a trajectory's steps are one key range.
        `CREATE TABLE steps (
           key bigint PRIMARY KEY, trajectory_id text NOT NULL, idx integer NOT NULL, channel text NOT NULL,
           group_id text NOT NULL, base_idx integer, prefix_len integer NOT NULL, prompt_suffix bytea NOT NULL,
           response bytea NOT NULL, logprobs bytea, prompt_len integer NOT NULL, response_len integer NOT NULL,
           content_hash bigint NOT NULL, reward double precision, policy_version integer NOT NULL,
           is_last integer NOT NULL, finish_reason text, token_source text NOT NULL, metadata text, view text,
           latency_ms double precision, ttft_ms double precision, engine_id text, created_at bigint NOT NULL
         )`,
        `CREATE INDEX steps_channel ON steps (channel)`,
        `CREATE INDEX steps_reward ON steps (channel, reward) WHERE reward IS NOT NULL`,
        `CREATE INDEX steps_version ON steps (policy_version, trajectory_id)`,
        `CREATE TABLE docs (hash text PRIMARY KEY, body text NOT NULL)`,
        `CREATE TABLE leases (
           id text PRIMARY KEY, channel text NOT NULL, consumer text NOT NULL, state text NOT NULL,
           group_ids text NOT NULL, n_steps integer NOT NULL, created_at bigint NOT NULL,
           expires_at bigint NOT NULL, ended_at bigint, seq bigserial
         )`,
        `CREATE INDEX leases_active ON leases (state, expires_at)`,
        `CREATE INDEX leases_recent ON leases (created_at DESC, seq DESC)`,
        `CREATE TABLE labels (
           id bigserial PRIMARY KEY, trajectory_id text NOT NULL, step_index integer,
           quality text, trainable integer, tags text, note text, author text, created_at bigint NOT NULL
         )`,
        `CREATE INDEX labels_target ON labels (trajectory_id, step_index)`,
        `CREATE TABLE label_current (
           trajectory_id text NOT NULL, step_index integer NOT NULL, quality text, trainable integer,
           tags text NOT NULL, note text, updated_at bigint NOT NULL, PRIMARY KEY (trajectory_id, step_index)
         )`,
        `CREATE INDEX label_current_trainable ON label_current (trainable)`,
        `CREATE INDEX label_current_quality ON label_current (quality)`,
        `CREATE TABLE label_tags (tag text NOT NULL, trajectory_id text NOT NULL, step_index integer NOT NULL,
           PRIMARY KEY (tag, trajectory_id, step_index))`,
        // Written only under the store's event lock, so seq order is commit order (see flush).
        `CREATE TABLE events (
           seq bigserial PRIMARY KEY, ts bigint NOT NULL, type text NOT NULL, channel text, data text NOT NULL
         )`,
        `CREATE TABLE counters (
           channel text NOT NULL, name text NOT NULL, value double precision NOT NULL, PRIMARY KEY (channel, name)
         )`,
        `CREATE TABLE signals (
           id bigserial PRIMARY KEY, trajectory_id text NOT NULL, step_index integer, name text NOT NULL,
           value double precision NOT NULL, source text NOT NULL, version text NOT NULL, details text,
           created_at bigint NOT NULL
         )`,
        `CREATE INDEX signals_trajectory ON signals (trajectory_id, created_at)`,
      ];
      for (const statement of statements) await sql.raw(statement).execute(db);
    },
  },
  '0002_reward_jobs': {
    async up(db: Kysely<unknown>) {
      // A job's target, as the queue matches it: its trajectory, else its group.
      const target = `(coalesce('t:' || trajectory_id, 'g:' || group_id))`;
      const statements = [
        // Reward jobs (packages/core/src/store/postgres/jobs.ts), as SQLite's 0003_reward_jobs.
        `CREATE TABLE reward_jobs (
           id bigserial PRIMARY KEY, kind text NOT NULL, channel text NOT NULL, trajectory_id text,
           group_id text, function text NOT NULL, version text NOT NULL, state text NOT NULL,
           attempts integer NOT NULL DEFAULT 0, max_attempts integer NOT NULL, run_at bigint NOT NULL,
           lease_until bigint, worker text, error text, errors text NOT NULL DEFAULT '[]', result text,
           reason text NOT NULL, created_at bigint NOT NULL, updated_at bigint NOT NULL, finished_at bigint
         )`,
        `CREATE INDEX reward_jobs_due ON reward_jobs (run_at, id) WHERE state = 'pending'`,
        `CREATE INDEX reward_jobs_state ON reward_jobs (state, id)`,
        `CREATE INDEX reward_jobs_trajectory ON reward_jobs (trajectory_id, function)`,
        `CREATE INDEX reward_jobs_group ON reward_jobs (group_id, function)`,
        // At most one pending job per (kind, function, target), whichever process queues it.
        `CREATE UNIQUE INDEX reward_jobs_pending_target ON reward_jobs (function, ${target}, kind)
           WHERE state = 'pending'`,
        // Claims skip a job whose twin runs: looked up here.
        `CREATE INDEX reward_jobs_running_target ON reward_jobs (function, ${target}, kind)
           WHERE state = 'running'`,
        `CREATE TABLE reward_cursors (name text PRIMARY KEY, seq bigint NOT NULL, updated_at bigint NOT NULL)`,
      ];
      for (const statement of statements) await sql.raw(statement).execute(db);
    },
  },
  '0003_flush_function': {
    async up(db: Kysely<unknown>) {
      // The end of every write transaction in one round trip (PostgresStore.flush): take the event
      // lock (held to the commit, so event seq follows commit order), append the events, announce
      // them, add the counters.
      await sql
        .raw(
          `CREATE FUNCTION stepwise_flush(
             lock_key text, ev_ts bigint[], ev_type text[], ev_channel text[], ev_data text[],
             c_channel text[], c_name text[], c_value float8[], notify_channel text, notify_payload text
           ) RETURNS void LANGUAGE plpgsql AS $$
           BEGIN
             PERFORM pg_advisory_xact_lock(hashtext(lock_key));
             IF cardinality(ev_ts) > 0 THEN
               INSERT INTO events (ts, type, channel, data) SELECT * FROM unnest(ev_ts, ev_type, ev_channel, ev_data);
               PERFORM pg_notify(notify_channel, notify_payload);
             END IF;
             IF cardinality(c_name) > 0 THEN
               INSERT INTO counters (channel, name, value) SELECT * FROM unnest(c_channel, c_name, c_value)
                 ON CONFLICT (channel, name) DO UPDATE SET value = counters.value + excluded.value;
             END IF;
           END $$`,
        )
        .execute(db);
    },
  },
  '0006_claw_r1_step_extras': {
    async up(db: Kysely<unknown>) {
      // As SQLite's 0006: Claw-R1's MoE routing per step, packed (step-codec encodeRoutedExperts).
      await sql.raw('ALTER TABLE steps ADD COLUMN routed_experts bytea').execute(db);
    },
  },
  '0007_pending_guidance': {
    async up(db: Kysely<unknown>) {
      // As SQLite's 0007_pending_guidance: a held group's threshold and when it began to wait.
      await sql
        .raw(`ALTER TABLE groups ADD COLUMN guidance_hold double precision, ADD COLUMN pending_since bigint`)
        .execute(db);
    },
  },
  '0008_mismatch': {
    async up(db: Kysely<unknown>) {
      // As SQLite's 0008_mismatch: reported steps, and their per lease, engine and version tallies.
      const statements = [
        `CREATE TABLE mismatch (
           lease_id text NOT NULL, trajectory_id text NOT NULL, step_index integer NOT NULL,
           channel text NOT NULL, engine_id text, policy_version integer NOT NULL, tokens integer NOT NULL,
           k1 double precision NOT NULL, k3 double precision NOT NULL, max_abs_diff double precision NOT NULL,
           masked_fraction double precision NOT NULL, created_at bigint NOT NULL,
           PRIMARY KEY (lease_id, trajectory_id, step_index)
         )`,
        `CREATE TABLE mismatch_leases (
           lease_id text NOT NULL, engine text NOT NULL, policy_version integer NOT NULL, channel text NOT NULL,
           at bigint NOT NULL, steps integer NOT NULL, tokens bigint NOT NULL, k1_sum double precision NOT NULL,
           k3_sum double precision NOT NULL, max_abs_diff double precision NOT NULL,
           masked_sum double precision NOT NULL, PRIMARY KEY (lease_id, engine, policy_version)
         )`,
        `CREATE INDEX mismatch_leases_channel ON mismatch_leases (channel, engine, at)`,
      ];
      for (const statement of statements) await sql.raw(statement).execute(db);
    },
  },
  '0009_leased_version': {
    async up(db: Kysely<unknown>) {
      // As SQLite's 0009_leased_version: the version each group was leased under.
      await sql.raw('ALTER TABLE groups ADD COLUMN leased_version integer').execute(db);
      await sql
        .raw(
          'CREATE INDEX groups_leased_version ON groups (channel, leased_version) WHERE leased_version IS NOT NULL',
        )
        .execute(db);
    },
  },
  '0010_prompts': {
    async up(db: Kysely<unknown>) {
      // As SQLite's 0010_prompts: the prompt scheduler's prompts and their history.
      await sql
        .raw(
          `CREATE TABLE prompts (
             channel text NOT NULL, task_id text NOT NULL, task_set text NOT NULL, position integer NOT NULL,
             handed integer NOT NULL DEFAULT 0, claimed_until bigint, last_handed_at bigint,
             groups integer NOT NULL DEFAULT 0, attempts integer NOT NULL DEFAULT 0,
             passes integer NOT NULL DEFAULT 0, last_n integer, last_pass_rate double precision,
             last_mean double precision, last_std double precision, last_version integer,
             added_at bigint NOT NULL, PRIMARY KEY (channel, task_id)
           )`,
        )
        .execute(db);
      await sql.raw('CREATE INDEX prompts_position ON prompts (channel, position)').execute(db);
    },
  },
  '0011_evidence': {
    async up(db: Kysely<unknown>) {
      // As SQLite's 0011_evidence: what each trajectory's verifier read, and content-addressed blobs.
      for (const statement of [
        `CREATE TABLE evidence_blobs (
           sha256 text PRIMARY KEY, size bigint NOT NULL, content bytea NOT NULL, added_at bigint NOT NULL
         )`,
        `CREATE TABLE evidence (
           trajectory_id text PRIMARY KEY, channel text NOT NULL, entries text NOT NULL, final_message text,
           files integer NOT NULL, bytes bigint NOT NULL, created_at bigint NOT NULL
         )`,
        'CREATE INDEX evidence_channel ON evidence (channel, trajectory_id)',
        'CREATE INDEX signals_pinned ON signals (trajectory_id, name, source, version) WHERE step_index IS NULL',
      ])
        await sql.raw(statement).execute(db);
    },
  },
};

export const postgresMigrations: MigrationProvider = {
  async getMigrations() {
    return migrations;
  },
};
