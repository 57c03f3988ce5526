import type { Kysely } from 'kysely';
import pg from 'pg';
import {
  type ChannelConfig,
  currentSignals,
  DEFAULT_CHANNEL_CONFIG,
  type EventType,
  type Group,
  type Label,
  type Lease,
  type PoolEvent,
  type Signal,
  type Step,
  StepwiseError,
  type Trajectory,
} from '../../domain/index.js';
import { compactColumnsSql, ListQueries, type ListSchema } from '../list-queries.js';
import {
  type CompactTrajectoryRow,
  type GroupRow,
  type LabelCurrentRow,
  type LabelRow,
  type LeaseRow,
  type SignalRow,
  type TrajectoryRow,
  toCurrentLabel,
  toGroup,
  toLabel,
  toLease,
  toSignal,
  toTrajectory,
} from '../rows.js';
import { decodeSteps, STEP_COLUMNS, STEP_KEY_SPAN, type StepRow, stepKey, TailCache } from '../step-codec.js';
import type {
  CurrentLabel,
  EventQuery,
  GroupQuery,
  Page,
  ScanPage,
  SignalQuery,
  StepQuery,
  Store,
  StoreChange,
  StoreInfo,
  TrajectoryQuery,
  TrajectoryRead,
  TrajectoryScan,
  WriteOptions,
} from '../store.js';
import { type PoolTx, type Rule, runAsync } from '../tx.js';
import { applicationName, inTransaction, openPostgresDatabase, redactUrl, unavailable } from './connect.js';
import { prepared } from './queries.js';
import { PgReadModels } from './read-models.js';
import { PgTx, type PgTxContext } from './tx.js';

export interface PostgresStoreOptions {
  /** `postgres://user@host:port/database` */
  url: string;
  /** Schema holding the tables (created when missing); default `public`. */
  schema?: string;
  /** Channel settings used when a channel is first seen. */
  channelDefaults?: Partial<ChannelConfig>;
  /** Connections this process keeps open (default 10). */
  poolSize?: number;
  tailCacheTokens?: number;
  /** Listen for changes made by other processes (default true). */
  listen?: boolean;
  /** The schema must already hold a store (connect.ts `existing`). */
  existing?: boolean;
}

/** Events that may let a waiting consumer lease (the others only feed event readers). */
const READY_EVENTS = new Set<EventType>([
  'group_ready',
  'lease_expired',
  'batch_nacked',
  'channel_configured',
  'label_changed',
]);

/** Opens the store in its schema (migrating it, or refusing a schema without one when `existing`). */
export async function openPostgresStore(options: PostgresStoreOptions): Promise<PostgresStore> {
  const { pool, kysely, schema } = await openPostgresDatabase<ListSchema>({
    url: options.url,
    schema: options.schema,
    poolSize: options.poolSize ?? 10,
    what: 'the store',
    ...(options.existing ? { existing: true } : {}),
  });
  const store = new PostgresStore(pool, kysely, schema, options);
  if (options.listen !== false) await store.listen();
  return store;
}

export { redactUrl };

/**
 * The Store on PostgreSQL: one pool for every process on the database. Row locks, SKIP LOCKED leases,
 * events in commit order, NOTIFY: docs/datapool.md#postgresql
 */
export class PostgresStore implements Store {
  readonly kind = 'postgres' as const;
  private readonly tails: TailCache;
  private readonly channelDefaults: ChannelConfig;
  private readonly queries: ListQueries;
  private readonly channel: string;
  private readonly lockKey: string;
  private readonly listeners = new Set<(change: StoreChange) => void>();
  private listener: pg.Client | null = null;
  private listenRetry: NodeJS.Timeout | null = null;
  private closed = false;

  constructor(
    private readonly pool: pg.Pool,
    private readonly kysely: Kysely<ListSchema>,
    private readonly schema: string,
    private readonly options: PostgresStoreOptions,
  ) {
    this.tails = new TailCache(options.tailCacheTokens);
    this.channelDefaults = { ...DEFAULT_CHANNEL_CONFIG, ...options.channelDefaults };
    this.txContext = {
      channelDefaults: this.channelDefaults,
      flushSteps: (tx) => this.flushSteps(tx),
      decodeMany: (tx, ranges) => this.decodeMany(tx, ranges),
      decodeTail: async (tx, seq, index) =>
        (await this.decode(tx, await this.stepRows(tx, seq, index))).tails.get(index) ?? null,
      cachedTail: (id) => this.tails.get(id),
    };
    this.queries = new ListQueries(kysely, 'postgres');
    this.channel = `stepwise_${schema}`;
    this.lockKey = `stepwise_events_${schema}`;
  }

  // ---- transactions ---------------------------------------------------------------------------

  private readonly txContext: PgTxContext;

  /**
   * Runs fn in one transaction and commits it with its events and counters; a transaction that
   * lost a race (deadlock, serialization failure, a row another process created first) runs again.
   */
  private async transact<T>(fn: (tx: PgTx) => Promise<T>): Promise<T> {
    let tx = null as PgTx | null;
    const value = await inTransaction(
      this.pool,
      async (client) => {
        tx = new PgTx(client, this.txContext);
        const result = await fn(tx);
        await this.flush(tx);
        return result;
      },
      { check: () => this.checkOpen() },
    );
    for (const [id, tail] of tx!.log.tails) this.tails.set(id, tail);
    for (const id of tx!.log.forgetTails) this.tails.delete(id);
    return value;
  }

  async write<T>(rule: (tx: PoolTx) => Rule<T>, _options?: WriteOptions): Promise<T> {
    return this.transact((tx) => runAsync(rule(tx)));
  }

  read<T>(rule: (tx: PoolTx) => Rule<T>): Promise<T> {
    return inTransaction(
      this.pool,
      (client) => runAsync(rule(new PgTx(client, this.txContext, undefined, undefined, true))),
      {
        begin: 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY',
        retry: false,
        check: () => this.checkOpen(),
      },
    );
  }

  private checkOpen(): void {
    if (this.closed) throw new StepwiseError('store is closed', 503, 'unavailable', undefined, true);
  }

  /** Appends the transaction's events and counters under the event lock, then announces them. */
  private async flush(tx: PgTx): Promise<void> {
    const log = tx.log;
    for (const [channel, byTrajectory] of log.submitted) {
      let count = 0;
      const trajectories = [...byTrajectory].map(([trajectory_uid, entry]) => {
        count += entry.count;
        return { trajectory_uid, ...entry };
      });
      tx.emit('steps_submitted', channel, { count, trajectories }, log.submittedAt);
    }
    const counters = [...log.counters].filter(([, v]) => v !== 0).sort((a, b) => (a[0] < b[0] ? -1 : 1));
    if (tx.events.length === 0 && counters.length === 0) return;
    const ready = tx.events.some((e) => READY_EVENTS.has(e.type));
    const policy = tx.events.some((e) => e.type === 'policy_version_changed');
    const split = counters.map(([key]) => key.split('\u0000') as [string, string]);
    await tx.run('SELECT stepwise_flush($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)', [
      this.lockKey,
      tx.events.map((e) => e.ts),
      tx.events.map((e) => e.type),
      tx.events.map((e) => e.channel),
      tx.events.map((e) => e.data),
      split.map((k) => k[0]),
      split.map((k) => k[1]),
      counters.map(([, v]) => v),
      this.channel,
      policy ? 'policy' : ready ? 'ready' : 'events',
    ]);
  }

  /** Reads outside a write transaction (each statement sees what was committed before it). */
  private async readRows<T>(text: string, values: unknown[] = []): Promise<T[]> {
    for (let attempt = 1; ; attempt++) {
      this.checkOpen();
      try {
        return (await this.pool.query(prepared(text, values))).rows as T[];
      } catch (error) {
        const failure = unavailable(error);
        // A read whose connection was lost runs again on another (a pooled one may have died idle).
        if (failure !== error && attempt < 3) continue;
        throw failure;
      }
    }
  }

  private async readOne<T>(text: string, values: unknown[] = []): Promise<T | undefined> {
    return (await this.readRows<T>(text, values))[0];
  }

  /** Runs reads on one connection in one snapshot (REPEATABLE READ, read only). */
  private async snapshot<T>(fn: (tx: PgTx) => Promise<T>): Promise<T> {
    return inTransaction(this.pool, (client) => fn(new PgTx(client, this.txContext)), {
      begin: 'BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY',
      retry: false,
      check: () => this.checkOpen(),
    });
  }

  // ---- change notifications -------------------------------------------------------------------

  subscribe(listener: (change: StoreChange) => void): () => void {
    this.listeners.add(listener);
    return () => this.listeners.delete(listener);
  }

  /** Keeps one connection LISTENing; reconnects after a lost connection (and wakes everyone then). */
  async listen(): Promise<void> {
    if (this.closed || this.listener) return;
    const client = new pg.Client({
      connectionString: this.options.url,
      fallback_application_name: applicationName(this.schema),
    });
    const lost = () => {
      if (this.listener !== client) return;
      this.listener = null;
      client.end().catch(() => {});
      if (this.closed) return;
      this.listenRetry = setTimeout(() => {
        this.listenRetry = null;
        void this.listen()
          .then(() => this.announce('ready'))
          .catch(() => lost());
      }, 500);
      this.listenRetry.unref();
    };
    client.on('error', lost);
    client.on('end', lost);
    client.on('notification', (message) => {
      if (message.channel !== this.channel) return;
      const change = (message.payload ?? 'events') as StoreChange;
      this.announce(change);
    });
    this.listener = client;
    try {
      await client.connect();
      await client.query(`LISTEN ${this.channel}`);
    } catch (error) {
      lost();
      throw error;
    }
  }

  private announce(change: StoreChange): void {
    for (const listener of this.listeners) listener(change);
  }

  // ---- meta and channels ----------------------------------------------------------------------

  private async policyVersionNow(tx?: PgTx): Promise<number> {
    const sqlText = "SELECT value FROM meta WHERE key = 'policy_version'";
    const row = tx
      ? await tx.row<{ value: string }>(sqlText)
      : await this.readOne<{ value: string }>(sqlText);
    return Number(row?.value ?? 0);
  }

  private parseConfig(row: { config: string } | undefined): ChannelConfig {
    return row ? { ...this.channelDefaults, ...JSON.parse(row.config) } : this.channelDefaults;
  }

  private channelConfig(tx: PgTx, channel: string): Promise<ChannelConfig> {
    return runAsync(tx.channelConfig(channel));
  }

  async getChannelConfig(channel: string): Promise<ChannelConfig> {
    return this.parseConfig(
      await this.readOne<{ config: string }>('SELECT config FROM channels WHERE name = $1', [channel]),
    );
  }

  // ---- policy version -------------------------------------------------------------------------

  async getPolicyVersion(): Promise<number> {
    return this.policyVersionNow();
  }

  // ---- groups ---------------------------------------------------------------------------------

  async getGroup(channel: string, id: string): Promise<Group | null> {
    const row = await this.readOne<GroupRow>('SELECT * FROM groups WHERE channel = $1 AND id = $2', [
      channel,
      id,
    ]);
    return row ? toGroup(row) : null;
  }

  /** A trajectory's stored step rows up to maxIndex, in index order: one key range. */
  private async stepRows(q: PgTx | null, seq: number, maxIndex = STEP_KEY_SPAN - 1): Promise<StepRow[]> {
    const text = 'SELECT * FROM steps WHERE key BETWEEN $1 AND $2 ORDER BY key';
    const values = [stepKey(seq, 0), stepKey(seq, Math.min(maxIndex, STEP_KEY_SPAN - 1))];
    return q ? q.rows<StepRow>(text, values) : this.readRows<StepRow>(text, values);
  }

  private async docs(
    q: PgTx | null,
    rows: readonly StepRow[],
  ): Promise<Map<string, Record<string, unknown>[]>> {
    const hashes = new Set<string>();
    for (const row of rows) {
      if (!row.view?.includes('"th"')) continue;
      const th = (JSON.parse(row.view) as { th?: string }).th;
      if (th) hashes.add(th);
    }
    const out = new Map<string, Record<string, unknown>[]>();
    if (hashes.size === 0) return out;
    const text = 'SELECT hash, body FROM docs WHERE hash = ANY($1::text[])';
    const found = q
      ? await q.rows<{ hash: string; body: string }>(text, [[...hashes]])
      : await this.readRows<{ hash: string; body: string }>(text, [[...hashes]]);
    for (const d of found) out.set(d.hash, JSON.parse(d.body));
    return out;
  }

  private async decode(q: PgTx | null, rows: StepRow[]): Promise<ReturnType<typeof decodeSteps>> {
    const docs = await this.docs(q, rows);
    return decodeSteps(rows, (hash) => docs.get(hash) ?? null);
  }

  /** Steps of many trajectories (by seq, each up to its max index) with one read of steps and docs. */
  private async decodeMany(q: PgTx | null, ranges: Map<number, number>): Promise<Map<number, Step[]>> {
    const out = new Map<number, Step[]>();
    if (ranges.size === 0) return out;
    const seqs = [...ranges.keys()];
    // One key range per trajectory, OR-ed: each range is an index scan (a join against unnest()
    // of the ranges is planned as a scan of the whole table).
    const rows: StepRow[] = [];
    for (let i = 0; i < seqs.length; i += 64) {
      const chunk = seqs.slice(i, i + 64);
      const text = `SELECT * FROM steps WHERE ${chunk.map((_, j) => `key BETWEEN $${2 * j + 1} AND $${2 * j + 2}`).join(' OR ')} ORDER BY key`;
      const values = chunk.flatMap((seq) => [
        stepKey(seq, 0),
        stepKey(seq, Math.min(ranges.get(seq)!, STEP_KEY_SPAN - 1)),
      ]);
      rows.push(...(q ? await q.rows<StepRow>(text, values) : await this.readRows<StepRow>(text, values)));
    }
    const docs = await this.docs(q, rows);
    const bySeq = new Map<number, StepRow[]>(seqs.map((seq) => [seq, []]));
    for (const row of rows) bySeq.get(Math.floor(row.key / STEP_KEY_SPAN))!.push(row);
    for (const [seq, list] of bySeq) out.set(seq, decodeSteps(list, (hash) => docs.get(hash) ?? null).steps);
    return out;
  }

  private async decodeRange(q: PgTx | null, seq: number, maxIndex = STEP_KEY_SPAN - 1): Promise<Step[]> {
    return (await this.decode(q, await this.stepRows(q, seq, maxIndex))).steps;
  }

  /** Inserts the pending step rows (and the tool documents they refer to): one statement each. */
  private async flushSteps(tx: PgTx): Promise<void> {
    const docs = tx.pendingDocs;
    if (docs.size > 0) {
      await tx.run(
        'INSERT INTO docs (hash, body) SELECT * FROM unnest($1::text[], $2::text[]) ON CONFLICT DO NOTHING',
        [[...docs.keys()], [...docs.values()]],
      );
      docs.clear();
    }
    const rows = tx.pendingSteps.splice(0);
    if (rows.length === 0) return;
    const casts: Record<string, string> = {
      key: 'bigint',
      idx: 'int',
      base_idx: 'int',
      prefix_len: 'int',
      prompt_suffix: 'bytea',
      response: 'bytea',
      logprobs: 'bytea',
      prompt_len: 'int',
      response_len: 'int',
      content_hash: 'bigint',
      reward: 'float8',
      policy_version: 'int',
      is_last: 'int',
      latency_ms: 'float8',
      ttft_ms: 'float8',
      created_at: 'bigint',
      routed_experts: 'bytea',
    };
    const columns = STEP_COLUMNS.map((c, i) => `$${i + 1}::${casts[c] ?? 'text'}[]`);
    await tx.run(
      `INSERT INTO steps (${STEP_COLUMNS.join(', ')}) SELECT * FROM unnest(${columns.join(', ')})`,
      STEP_COLUMNS.map((c) => rows.map((r) => r[c])),
    );
  }

  // ---- reads ----------------------------------------------------------------------------------

  async getTrajectory(id: string, read: TrajectoryRead = {}): Promise<Trajectory | null> {
    const n = read.inlineMetadataBytes;
    const columns = n === undefined ? '*' : compactColumnsSql(n);
    const row = await this.readOne<CompactTrajectoryRow>(
      `SELECT ${columns} FROM trajectories WHERE id = $1`,
      [id],
    );
    return row ? toTrajectory(row) : null;
  }

  private async loadSteps(trajectoryId: string, maxIndex = STEP_KEY_SPAN - 1): Promise<Step[]> {
    const row = await this.readOne<{ seq: number }>('SELECT seq FROM trajectories WHERE id = $1', [
      trajectoryId,
    ]);
    return row ? this.decodeRange(null, row.seq, maxIndex) : [];
  }

  async getTrajectorySteps(id: string): Promise<Step[]> {
    return this.loadSteps(id);
  }

  async getStep(trajectoryId: string, index: number): Promise<Step | null> {
    return (await this.loadSteps(trajectoryId, index)).find((s) => s.index === index) ?? null;
  }

  async listSteps(query: StepQuery): Promise<Page<Step>> {
    return this.snapshot(async (tx) => {
      const count = this.queries.stepCountQuery(query);
      const total = (await tx.client.query(count.sql, count.parameters as unknown[])).rows[0].n as number;
      const page = this.queries.stepPageQuery(query);
      const keys = (await tx.client.query(page.sql, page.parameters as unknown[])).rows.map((r) =>
        Number(r.key),
      );
      // Decode each trajectory once, up to the highest step this page needs from it.
      const needed = new Map<number, number>();
      for (const key of keys) {
        const seq = Math.floor(key / STEP_KEY_SPAN);
        needed.set(seq, Math.max(needed.get(seq) ?? 0, key - seq * STEP_KEY_SPAN));
      }
      const decoded = new Map<number, Step>();
      for (const [seq, steps] of await this.decodeMany(tx, needed))
        for (const step of steps) decoded.set(stepKey(seq, step.index), step);
      return { total, items: keys.map((key) => decoded.get(key)!) };
    });
  }

  async listTrajectories(query: TrajectoryQuery): Promise<Page<Trajectory>> {
    return this.snapshot(async (tx) => {
      const count = this.queries.trajectoryCountQuery(query);
      const total = (await tx.client.query(count.sql, count.parameters as unknown[])).rows[0].n as number;
      const page = this.queries.trajectoryPageQuery(query);
      const rows = (await tx.client.query(page.sql, page.parameters as unknown[])).rows as TrajectoryRow[];
      return { total, items: rows.map(toTrajectory) };
    });
  }

  async scanTrajectories(query: TrajectoryScan): Promise<ScanPage<Trajectory>> {
    const c = this.queries.trajectoryScanQuery(query);
    const rows = await this.readRows<TrajectoryRow>(c.sql, c.parameters as unknown[]);
    const last = rows.at(-1);
    return {
      items: rows.map(toTrajectory),
      cursor: last && rows.length === query.limit ? String(last.seq) : null,
    };
  }

  // ---- leases ---------------------------------------------------------------------------------

  // ---- guidance holds (ActGuide-RL) -----------------------------------------------------------

  async listGroups(query: GroupQuery): Promise<Page<Group>> {
    const where: string[] = [];
    const params: unknown[] = [];
    if (query.channel !== undefined) {
      params.push(query.channel);
      where.push(`channel = $${params.length}`);
    }
    if (query.state !== undefined) {
      params.push(query.state);
      where.push(`state = $${params.length}`);
    }
    const clause = where.length > 0 ? `WHERE ${where.join(' AND ')}` : '';
    const counted = await this.readOne<{ n: number }>(`SELECT count(*) AS n FROM groups ${clause}`, params);
    const rows = await this.readRows<GroupRow>(
      `SELECT * FROM groups ${clause} ORDER BY created_at DESC, id DESC LIMIT $${params.length + 1} OFFSET $${params.length + 2}`,
      [...params, query.limit, query.offset],
    );
    return { items: rows.map(toGroup), total: Number(counted!.n) };
  }

  async getLease(leaseId: string): Promise<Lease | null> {
    const row = await this.readOne<LeaseRow>('SELECT * FROM leases WHERE id = $1', [leaseId]);
    return row ? toLease(row) : null;
  }

  // ---- labels ---------------------------------------------------------------------------------

  async getCurrentLabels(trajectoryId: string): Promise<CurrentLabel[]> {
    return (
      await this.readRows<LabelCurrentRow>(
        'SELECT * FROM label_current WHERE trajectory_id = $1 ORDER BY step_index',
        [trajectoryId],
      )
    ).map(toCurrentLabel);
  }

  async getLabels(trajectoryId: string): Promise<Label[]> {
    return (
      await this.readRows<LabelRow>('SELECT * FROM labels WHERE trajectory_id = $1 ORDER BY id', [
        trajectoryId,
      ])
    ).map(toLabel);
  }

  // ---- signals --------------------------------------------------------------------------------

  async getSignals(trajectoryId: string, options: SignalQuery = {}): Promise<Signal[]> {
    const history = (
      await this.readRows<SignalRow>(
        'SELECT * FROM signals WHERE trajectory_id = $1 ORDER BY created_at, id',
        [trajectoryId],
      )
    ).map(toSignal);
    return options.current ? currentSignals(history) : history;
  }

  // ---- events and stats -----------------------------------------------------------------------

  async readEvents(query: EventQuery): Promise<PoolEvent[]> {
    const rows = await this.readRows<{
      seq: number;
      ts: number;
      type: EventType;
      channel: string | null;
      data: string;
    }>(
      `SELECT * FROM events WHERE seq > $1 AND ($2::text IS NULL OR channel = $2)
         AND ($3::text[] IS NULL OR type = ANY($3::text[])) ORDER BY seq LIMIT $4`,
      [
        query.after,
        query.channel ?? null,
        query.types && query.types.length > 0 ? query.types : null,
        query.limit,
      ],
    );
    return rows.map((r) => ({
      seq: r.seq,
      ts: r.ts,
      type: r.type,
      channel: r.channel,
      data: JSON.parse(r.data),
    }));
  }

  async lastEventSeq(): Promise<number> {
    const row = await this.readOne<{ seq: number | null }>('SELECT max(seq) AS seq FROM events');
    return row?.seq ?? 0;
  }

  /** The dashboard's and the gym's views (store/read-models.ts). */
  readonly views = new PgReadModels({
    rows: (text, values) => this.readRows(text, values),
    one: (text, values) => this.readOne(text, values),
    snapshot: (fn) => this.snapshot(fn),
  });

  async describe(): Promise<StoreInfo> {
    return { kind: 'postgres', path: null };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    if (this.listenRetry) clearTimeout(this.listenRetry);
    const listener = this.listener;
    this.listener = null;
    await listener?.end().catch(() => {});
    this.listeners.clear();
    await this.kysely.destroy();
  }
}
