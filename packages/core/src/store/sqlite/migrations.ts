import { type Kysely, type Migration, type MigrationProvider, sql } from 'kysely';

/** Schema history; append new migrations, never edit a released one. */
const migrations: Record<string, Migration> = {
  '0001_pool': {
    async up(db: Kysely<unknown>) {
      const statements = [
        `CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID`,
        `CREATE TABLE channels (
           name TEXT PRIMARY KEY, config TEXT NOT NULL, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL
         ) WITHOUT ROWID`,
        `CREATE TABLE groups (
           channel TEXT NOT NULL, id TEXT NOT NULL, expected INTEGER,
           n_trajectories INTEGER NOT NULL DEFAULT 0, n_finished INTEGER NOT NULL DEFAULT 0,
           n_complete INTEGER NOT NULL DEFAULT 0, state TEXT NOT NULL, drop_reason TEXT,
           partial INTEGER NOT NULL DEFAULT 0, min_policy_version INTEGER,
           created_at INTEGER NOT NULL, ready_at INTEGER, ready_seq INTEGER, lease_id TEXT, consumed_at INTEGER,
           PRIMARY KEY (channel, id)
         )`,
        `CREATE INDEX groups_fifo ON groups (channel, state, ready_seq)`,
        `CREATE INDEX groups_age ON groups (state, created_at)`,
        `CREATE INDEX groups_lease ON groups (lease_id) WHERE lease_id IS NOT NULL`,
        // seq is a stable integer key (an INTEGER PRIMARY KEY survives VACUUM) that orders steps.
        `CREATE TABLE trajectories (
           seq INTEGER PRIMARY KEY, id TEXT NOT NULL UNIQUE, channel TEXT NOT NULL, group_id TEXT NOT NULL, task_id TEXT,
           status TEXT NOT NULL, reward REAL, metadata TEXT NOT NULL,
           n_steps INTEGER NOT NULL DEFAULT 0, max_index INTEGER, last_index INTEGER,
           prefix_breaks INTEGER NOT NULL DEFAULT 0, min_policy_version INTEGER, counted INTEGER NOT NULL DEFAULT 0,
           created_at INTEGER NOT NULL, touched_at INTEGER NOT NULL, completed_at INTEGER,
           guided INTEGER NOT NULL DEFAULT 0, guidance_k INTEGER, probe INTEGER NOT NULL DEFAULT 0,
           derived_from TEXT, derivation TEXT
         )`,
        `CREATE INDEX trajectories_group ON trajectories (group_id, channel, status)`,
        `CREATE INDEX trajectories_channel ON trajectories (channel)`,
        `CREATE INDEX trajectories_status ON trajectories (status, channel)`,
        `CREATE INDEX trajectories_reward ON trajectories (channel, reward)`,
        `CREATE INDEX trajectories_task ON trajectories (task_id) WHERE task_id IS NOT NULL`,
        `CREATE INDEX trajectories_idle ON trajectories (channel, touched_at) WHERE status = 'open'`,
        // Token arrays are packed uint32; a prompt is the first prefix_len tokens of step base_idx's
        // full sequence plus prompt_suffix, so history repeated in every prompt is stored once.
        // key = trajectory seq * 2^20 + idx: a trajectory's steps are one rowid range, inserts land
        // near the end of the table, and no separate (trajectory, step) index is maintained.
        `CREATE TABLE steps (
           key INTEGER PRIMARY KEY, trajectory_id TEXT NOT NULL, idx INTEGER NOT NULL, channel TEXT NOT NULL,
           group_id TEXT NOT NULL, base_idx INTEGER, prefix_len INTEGER NOT NULL, prompt_suffix BLOB NOT NULL,
           response BLOB NOT NULL, logprobs BLOB, prompt_len INTEGER NOT NULL, response_len INTEGER NOT NULL,
           content_hash INTEGER NOT NULL, reward REAL, policy_version INTEGER NOT NULL, is_last INTEGER NOT NULL,
           finish_reason TEXT, token_source TEXT NOT NULL, metadata TEXT, view TEXT, latency_ms REAL, ttft_ms REAL,
           engine_id TEXT, created_at INTEGER NOT NULL
         )`,
        `CREATE INDEX steps_channel ON steps (channel)`,
        `CREATE INDEX steps_reward ON steps (channel, reward) WHERE reward IS NOT NULL`,
        `CREATE TABLE docs (hash TEXT PRIMARY KEY, body TEXT NOT NULL) WITHOUT ROWID`,
        `CREATE TABLE leases (
           id TEXT PRIMARY KEY, channel TEXT NOT NULL, consumer TEXT NOT NULL, state TEXT NOT NULL,
           group_ids TEXT NOT NULL, n_steps INTEGER NOT NULL, created_at INTEGER NOT NULL,
           expires_at INTEGER NOT NULL, ended_at INTEGER
         )`,
        `CREATE INDEX leases_active ON leases (state, expires_at)`,
        `CREATE TABLE labels (
           id INTEGER PRIMARY KEY AUTOINCREMENT, trajectory_id TEXT NOT NULL, step_index INTEGER,
           quality TEXT, trainable INTEGER, tags TEXT, note TEXT, author TEXT, created_at INTEGER NOT NULL
         )`,
        `CREATE INDEX labels_target ON labels (trajectory_id, step_index)`,
        // Latest state per target (-1 = the whole trajectory), folded from the append-only labels.
        `CREATE TABLE label_current (
           trajectory_id TEXT NOT NULL, step_index INTEGER NOT NULL, quality TEXT, trainable INTEGER,
           tags TEXT NOT NULL, note TEXT, updated_at INTEGER NOT NULL, PRIMARY KEY (trajectory_id, step_index)
         ) WITHOUT ROWID`,
        `CREATE INDEX label_current_trainable ON label_current (trainable)`,
        `CREATE INDEX label_current_quality ON label_current (quality)`,
        `CREATE TABLE label_tags (tag TEXT NOT NULL, trajectory_id TEXT NOT NULL, step_index INTEGER NOT NULL,
           PRIMARY KEY (tag, trajectory_id, step_index)) WITHOUT ROWID`,
        `CREATE TABLE events (
           seq INTEGER PRIMARY KEY AUTOINCREMENT, ts INTEGER NOT NULL, type TEXT NOT NULL, channel TEXT, data TEXT NOT NULL
         )`,
        `CREATE TABLE counters (
           channel TEXT NOT NULL, name TEXT NOT NULL, value INTEGER NOT NULL, PRIMARY KEY (channel, name)
         ) WITHOUT ROWID`,
      ];
      for (const statement of statements) await sql.raw(statement).execute(db);
    },
  },
  '0002_signals': {
    async up(db: Kysely<unknown>) {
      const statements = [
        // Append-only reward and quality scores (step_index NULL: the whole trajectory). The latest
        // row per (trajectory, step, name, source) is in force; the rowid orders ties in created_at.
        `CREATE TABLE signals (
           id INTEGER PRIMARY KEY, trajectory_id TEXT NOT NULL, step_index INTEGER, name TEXT NOT NULL,
           value REAL NOT NULL, source TEXT NOT NULL, version TEXT NOT NULL, details TEXT,
           created_at INTEGER NOT NULL
         )`,
        `CREATE INDEX signals_trajectory ON signals (trajectory_id, created_at)`,
      ];
      for (const statement of statements) await sql.raw(statement).execute(db);
    },
  },
  '0003_reward_jobs': {
    async up(db: Kysely<unknown>) {
      const statements = [
        // Reward jobs (packages/core/src/rewards/job-queue.ts): one reward function (or a combination) for one
        // trajectory or group, retried with backoff; a failed job keeps its errors as the record.
        `CREATE TABLE reward_jobs (
           id INTEGER PRIMARY KEY, kind TEXT NOT NULL, channel TEXT NOT NULL, trajectory_id TEXT,
           group_id TEXT, function TEXT NOT NULL, version TEXT NOT NULL, state TEXT NOT NULL,
           attempts INTEGER NOT NULL DEFAULT 0, max_attempts INTEGER NOT NULL, run_at INTEGER NOT NULL,
           lease_until INTEGER, worker TEXT, error TEXT, errors TEXT NOT NULL DEFAULT '[]', result TEXT,
           reason TEXT NOT NULL, created_at INTEGER NOT NULL, updated_at INTEGER NOT NULL, finished_at INTEGER
         )`,
        `CREATE INDEX reward_jobs_due ON reward_jobs (state, run_at)`,
        `CREATE INDEX reward_jobs_trajectory ON reward_jobs (trajectory_id, function)`,
        `CREATE INDEX reward_jobs_group ON reward_jobs (group_id, function)`,
        // Where the reward scheduler is in the event log, so a restart resumes there.
        `CREATE TABLE reward_cursors (name TEXT PRIMARY KEY, seq INTEGER NOT NULL, updated_at INTEGER NOT NULL) WITHOUT ROWID`,
      ];
      for (const statement of statements) await sql.raw(statement).execute(db);
    },
  },
  '0004_covering_trajectory_indexes': {
    async up(db: Kysely<unknown>) {
      // The group and status indexes also carry what the dashboard's reward histogram and group
      // outcome mix read (counted, reward), so those read the indexes alone (3-4x faster at 1M
      // steps). Same leading columns: every query that used the old ones uses these.
      const statements = [
        `DROP INDEX trajectories_group`,
        `CREATE INDEX trajectories_group ON trajectories (group_id, channel, status, counted, reward)`,
        `DROP INDEX trajectories_status`,
        `CREATE INDEX trajectories_status ON trajectories (status, channel, reward)`,
      ];
      for (const statement of statements) await sql.raw(statement).execute(db);
    },
  },
  '0005_gym_run_index': {
    async up(db: Kysely<unknown>) {
      // Gym runs (the dashboard's gym page) are grouped by metadata fields: an index on those
      // expressions, holding only trajectories of gym runs, answers the grouping without reading
      // the table. The query must spell the expressions exactly so (sqlite-store gymRuns).
      await sql
        .raw(
          `CREATE INDEX trajectories_gym_run ON trajectories (
             json_extract(metadata, '$.run_id'), channel, json_extract(metadata, '$.category'), task_id,
             status, reward, probe, derived_from, created_at, completed_at
           ) WHERE json_extract(metadata, '$.run_id') IS NOT NULL`,
        )
        .execute(db);
    },
  },
  '0006_claw_r1_step_extras': {
    async up(db: Kysely<unknown>) {
      // Claw-R1's MoE routing per step, packed (step-codec encodeRoutedExperts); its
      // multi_modal_data lives in the step's view JSON.
      await sql.raw('ALTER TABLE steps ADD COLUMN routed_experts BLOB').execute(db);
    },
  },
  '0007_pending_guidance': {
    async up(db: Kysely<unknown>) {
      // ActGuide-RL's hold (docs/datapool.md): the threshold a held group is hard at, and when it
      // entered pending_guidance (for the hold's timeout). The state itself is a value of `state`.
      const statements = [
        `ALTER TABLE groups ADD COLUMN guidance_hold REAL`,
        `ALTER TABLE groups ADD COLUMN pending_since INTEGER`,
      ];
      for (const statement of statements) await sql.raw(statement).execute(db);
    },
  },
  '0008_mismatch': {
    async up(db: Kysely<unknown>) {
      const statements = [
        // Rollout-vs-trainer mismatch a trainer reported per leased step (packages/core/src/pool/mismatch.ts); the
        // engine and version are the stored step's. A step reported again for a lease replaces its row.
        `CREATE TABLE mismatch (
           lease_id TEXT NOT NULL, trajectory_id TEXT NOT NULL, step_index INTEGER NOT NULL,
           channel TEXT NOT NULL, engine_id TEXT, policy_version INTEGER NOT NULL, tokens INTEGER NOT NULL,
           k1 REAL NOT NULL, k3 REAL NOT NULL, max_abs_diff REAL NOT NULL, masked_fraction REAL NOT NULL,
           created_at INTEGER NOT NULL, PRIMARY KEY (lease_id, trajectory_id, step_index)
         ) WITHOUT ROWID`,
        // Per lease, engine ('' for none) and version, rebuilt from the rows above on each report:
        // what /v1/stats aggregates, leases x engines x versions rows rather than one per step.
        `CREATE TABLE mismatch_leases (
           lease_id TEXT NOT NULL, engine TEXT NOT NULL, policy_version INTEGER NOT NULL, channel TEXT NOT NULL,
           at INTEGER NOT NULL, steps INTEGER NOT NULL, tokens INTEGER NOT NULL, k1_sum REAL NOT NULL,
           k3_sum REAL NOT NULL, max_abs_diff REAL NOT NULL, masked_sum REAL NOT NULL,
           PRIMARY KEY (lease_id, engine, policy_version)
         ) WITHOUT ROWID`,
        `CREATE INDEX mismatch_leases_channel ON mismatch_leases (channel, engine, at)`,
      ];
      for (const statement of statements) await sql.raw(statement).execute(db);
    },
  },
  '0009_leased_version': {
    async up(db: Kysely<unknown>) {
      // The policy version a group was leased under: admission control counts the groups of the
      // batch being trained (leased or consumed under the version in force) as still ahead.
      await sql.raw('ALTER TABLE groups ADD COLUMN leased_version INTEGER').execute(db);
      await sql
        .raw(
          'CREATE INDEX groups_leased_version ON groups (channel, leased_version) WHERE leased_version IS NOT NULL',
        )
        .execute(db);
    },
  },
  '0010_prompts': {
    async up(db: Kysely<unknown>) {
      // The prompt scheduler (packages/core/src/pool/schedule.ts): a channel's prompts in
      // registration order, whether one is in flight, and the history of its groups.
      await sql
        .raw(
          `CREATE TABLE prompts (
             channel TEXT NOT NULL, task_id TEXT NOT NULL, task_set TEXT NOT NULL, position INTEGER NOT NULL,
             handed INTEGER NOT NULL DEFAULT 0, claimed_until INTEGER, last_handed_at INTEGER,
             groups INTEGER NOT NULL DEFAULT 0, attempts INTEGER NOT NULL DEFAULT 0,
             passes INTEGER NOT NULL DEFAULT 0, last_n INTEGER, last_pass_rate REAL, last_mean REAL,
             last_std REAL, last_version INTEGER, added_at INTEGER NOT NULL,
             PRIMARY KEY (channel, task_id)
           ) WITHOUT ROWID`,
        )
        .execute(db);
      await sql.raw('CREATE INDEX prompts_position ON prompts (channel, position)').execute(db);
    },
  },
  '0011_evidence': {
    async up(db: Kysely<unknown>) {
      // Re-verification (packages/core/src/pool/evidence.ts): what each trajectory's verifier read, as a
      // manifest of content-addressed blobs (a task's input files are stored once for all its samples).
      for (const statement of [
        `CREATE TABLE evidence_blobs (
           sha256 TEXT PRIMARY KEY, size INTEGER NOT NULL, content BLOB NOT NULL, added_at INTEGER NOT NULL
         )`,
        `CREATE TABLE evidence (
           trajectory_id TEXT PRIMARY KEY, channel TEXT NOT NULL, entries TEXT NOT NULL, final_message TEXT,
           files INTEGER NOT NULL, bytes INTEGER NOT NULL, created_at INTEGER NOT NULL
         )`,
        'CREATE INDEX evidence_channel ON evidence (channel, trajectory_id)',
        'CREATE INDEX signals_pinned ON signals (trajectory_id, name, source, version) WHERE step_index IS NULL',
      ])
        await sql.raw(statement).execute(db);
    },
  },
};

export const sqliteMigrations: MigrationProvider = {
  async getMigrations() {
    return migrations;
  },
};
