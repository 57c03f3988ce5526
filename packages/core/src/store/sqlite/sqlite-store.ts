import { resolve } from 'node:path';
import Database from 'better-sqlite3';
import { Kysely, Migrator, SqliteDialect } from 'kysely';
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
  TxLog,
  toCurrentLabel,
  toGroup,
  toLabel,
  toLease,
  toSignal,
  toTrajectory,
} from '../rows.js';
import { decodeSteps, STEP_KEY_SPAN, type StepRow, stepKey, TailCache } from '../step-codec.js';
import type {
  CurrentLabel,
  EventQuery,
  GroupQuery,
  Page,
  ScanPage,
  SignalQuery,
  StepQuery,
  Store,
  StoreInfo,
  TrajectoryQuery,
  TrajectoryRead,
  TrajectoryScan,
  WriteOptions,
} from '../store.js';
import { type PoolTx, type Rule, runSync } from '../tx.js';
import { sqliteMigrations } from './migrations.js';
import { SqliteReadModels } from './read-models.js';
import { type Statement, statementCache } from './statements.js';
import { SqliteTx, type SqliteTxContext } from './tx.js';
import { WalSync } from './wal-sync.js';

export interface SqliteStoreOptions {
  path: string;
  /** FULL (default) fsyncs every commit: an acknowledged step survives power loss, not just a crash. */
  synchronous?: 'FULL' | 'NORMAL';
  /** Channel settings used when a channel is first seen. */
  channelDefaults?: Partial<ChannelConfig>;
  tailCacheTokens?: number;
  busyTimeoutMs?: number;
}

export async function openSqliteStore(options: SqliteStoreOptions): Promise<SqliteStore> {
  const db = new Database(options.path);
  const journal = db.pragma('journal_mode = WAL', { simple: true });
  const synchronous = options.synchronous ?? 'FULL';
  db.pragma(`synchronous = ${synchronous}`);
  db.pragma(`busy_timeout = ${options.busyTimeoutMs ?? 10_000}`);
  db.pragma('cache_size = -65536');
  db.pragma('temp_store = MEMORY');
  const kysely = new Kysely<ListSchema>({ dialect: new SqliteDialect({ database: db }) });
  const migrator = new Migrator({ db: kysely, provider: sqliteMigrations });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === 'Error');
  if (error || failed) {
    await kysely.destroy();
    throw new Error(`migrating ${options.path} failed at ${failed?.migrationName ?? '?'}: ${String(error)}`);
  }
  // FULL: commit without flushing and flush the WAL off the thread before acknowledging (WalSync).
  // Where there is no WAL file to flush (an in-memory database), SQLite's own FULL stays on.
  const wal = synchronous === 'FULL' && journal === 'wal' ? WalSync.open(`${db.name}-wal`) : null;
  if (wal) db.pragma('synchronous = NORMAL');
  return new SqliteStore(db, kysely, options, wal);
}

/**
 * SQLite's disk errors as errors that say what happened (503: send it again; a stored step sent
 * again is a duplicate). A full disk rolls the transaction back and leaves the database intact, so
 * writes resume by themselves once there is space; no restart is needed.
 */
function storageFailure(error: unknown, path: string | null): unknown {
  const code = (error as { code?: unknown }).code;
  if (typeof code !== 'string') return error;
  const where = path ?? 'the database';
  if (code === 'SQLITE_FULL') {
    return new StepwiseError(
      `the disk holding ${where} is full (SQLITE_FULL): nothing was stored; free space on it and send again (no restart needed)`,
      503,
      'disk_full',
      undefined,
      true,
    );
  }
  if (code.startsWith('SQLITE_IOERR') || code === 'SQLITE_CANTOPEN') {
    return new StepwiseError(
      `${where} could not be written (${code}: ${(error as Error).message}): the write was not acknowledged; check its disk and send again`,
      503,
      'storage_error',
      undefined,
      true,
    );
  }
  return error;
}

export class SqliteStore implements Store {
  readonly kind = 'sqlite' as const;
  private readonly tails: TailCache;
  private readonly channelDefaults: ChannelConfig;
  private readonly path: string | null;
  private closed = false;

  private readonly queries: ListQueries;
  /** Prepared statements, one per SQL text. */
  private readonly stmt: (source: string) => Statement;

  constructor(
    private readonly db: Database.Database,
    private readonly kysely: Kysely<ListSchema>,
    options: SqliteStoreOptions,
    /** Flushes commits to disk off the thread (synchronous FULL on a file database), else null. */
    private readonly wal: WalSync | null = null,
  ) {
    this.stmt = statementCache(db);
    this.queries = new ListQueries(kysely, 'sqlite');
    this.tails = new TailCache(options.tailCacheTokens);
    this.savepoint = db.transaction(<T>(fn: () => T): T => fn()) as <T>(fn: () => T) => T;
    this.channelDefaults = { ...DEFAULT_CHANNEL_CONFIG, ...options.channelDefaults };
    this.path = options.path === '' || options.path === ':memory:' ? null : resolve(options.path);
  }

  private readonly txContext: SqliteTxContext = {
    stmt: (source) => this.stmt(source),
    channelConfig: (channel) => this.channelConfig(channel),
    saveChannelConfig: (channel, config, now) => this.saveChannelConfig(channel, config, now),
    ensureChannel: (channel, now) => this.ensureChannel(channel, now),
    policyVersion: () => this.policyVersionNow(),
    decodeRange: (seq) => this.decodeRange(seq),
    decodeTail: (seq, index) =>
      decodeSteps(this.stepRows(seq, index), (hash) => this.doc(hash)).tails.get(index) ?? null,
    cachedTail: (id) => this.tails.get(id),
    savepoint: (fn) => this.savepoint(fn),
    emit: (type, channel, data, now) => this.emit(type, channel, data, now),
  };

  /** The pool rules' view of the open transaction, logging to `log`. */
  private tx(log: TxLog): SqliteTx {
    return new SqliteTx(this.txContext, log);
  }

  /** Runs fn in a savepoint of the open transaction (better-sqlite3 nests transactions that way). */
  private readonly savepoint: <T>(fn: () => T) => T;
  /** Channel settings read during the open write transaction (settings change rarely; reads add up). */
  private txChannels: Map<string, ChannelConfig> | null = null;

  async write<T>(rule: (tx: PoolTx) => Rule<T>, options: WriteOptions = {}): Promise<T> {
    const value = this.commit((log) => runSync(rule(this.tx(log))));
    if (options.durable !== false) await this.wal?.durable();
    return value;
  }

  async read<T>(rule: (tx: PoolTx) => Rule<T>): Promise<T> {
    if (this.closed) throw new StepwiseError('store is closed', 503, 'unavailable', undefined, true);
    // Synchronous: no write can land between its statements.
    return runSync(rule(this.tx(new TxLog())));
  }

  /** Runs fn in one IMMEDIATE transaction, writes its counters, then applies its cache effects. */
  private commit<T>(fn: (log: TxLog) => T): T {
    if (this.closed) throw new StepwiseError('store is closed', 503, 'unavailable', undefined, true);
    const log = new TxLog();
    this.txChannels = new Map();
    let result: T;
    try {
      result = this.db
        .transaction(() => {
          const value = fn(log);
          this.flushLog(log);
          return value;
        })
        .immediate();
      this.wal?.commit();
    } catch (error) {
      throw storageFailure(error, this.path);
    } finally {
      this.txChannels = null;
    }
    for (const [id, tail] of log.tails) this.tails.set(id, tail);
    for (const id of log.forgetTails) this.tails.delete(id);
    return result;
  }

  private flushLog(log: TxLog): void {
    for (const [channel, byTrajectory] of log.submitted) {
      let count = 0;
      const trajectories = [...byTrajectory].map(([trajectory_uid, entry]) => {
        count += entry.count;
        return { trajectory_uid, ...entry };
      });
      this.emit('steps_submitted', channel, { count, trajectories }, log.submittedAt);
    }
    this.flushCounters(log);
  }

  private flushCounters(log: TxLog): void {
    const upsert = this.stmt(
      'INSERT INTO counters (channel, name, value) VALUES (?, ?, ?) ON CONFLICT (channel, name) DO UPDATE SET value = value + excluded.value',
    );
    for (const [key, value] of log.counters) {
      if (value === 0) continue;
      const [channel, name] = key.split('\u0000') as [string, string];
      upsert.run(channel, name, value);
    }
  }

  private emit(type: EventType, channel: string | null, data: Record<string, unknown>, now: number): void {
    this.stmt('INSERT INTO events (ts, type, channel, data) VALUES (?, ?, ?, ?)').run(
      now,
      type,
      channel,
      JSON.stringify(data),
    );
  }

  private readMeta(key: string): string | undefined {
    const row = this.stmt('SELECT value FROM meta WHERE key = ?').get(key) as { value: string } | undefined;
    return row?.value;
  }

  private policyVersionNow(): number {
    return Number(this.readMeta('policy_version') ?? 0);
  }

  // ---- channels -------------------------------------------------------------------------------

  private channelConfig(channel: string): ChannelConfig {
    const cached = this.txChannels?.get(channel);
    if (cached) return cached;
    const config = this.readChannelConfig(channel);
    this.txChannels?.set(channel, config);
    return config;
  }

  private readChannelConfig(channel: string): ChannelConfig {
    const row = this.stmt('SELECT config FROM channels WHERE name = ?').get(channel) as
      | { config: string }
      | undefined;
    return row ? { ...this.channelDefaults, ...JSON.parse(row.config) } : this.channelDefaults;
  }

  private ensureChannel(channel: string, now: number): void {
    this.stmt(
      'INSERT INTO channels (name, config, created_at, updated_at) VALUES (?, ?, ?, ?) ON CONFLICT DO NOTHING',
    ).run(channel, JSON.stringify(this.channelDefaults), now, now);
  }

  private saveChannelConfig(channel: string, config: ChannelConfig, now: number): void {
    this.txChannels?.set(channel, config);
    this.stmt(
      `INSERT INTO channels (name, config, created_at, updated_at) VALUES (?, ?, ?, ?)
       ON CONFLICT (name) DO UPDATE SET config = excluded.config, updated_at = excluded.updated_at`,
    ).run(channel, JSON.stringify(config), now, now);
  }

  async getChannelConfig(channel: string): Promise<ChannelConfig> {
    return this.channelConfig(channel);
  }

  // ---- policy version -------------------------------------------------------------------------

  async getPolicyVersion(): Promise<number> {
    return this.policyVersionNow();
  }

  // ---- groups ---------------------------------------------------------------------------------

  private groupRow(channel: string, id: string): GroupRow | undefined {
    return this.stmt('SELECT * FROM groups WHERE channel = ? AND id = ?').get(channel, id) as
      | GroupRow
      | undefined;
  }

  async getGroup(channel: string, id: string): Promise<Group | null> {
    const row = this.groupRow(channel, id);
    return row ? toGroup(row) : null;
  }

  // ---- ingestion ------------------------------------------------------------------------------

  private trajectoryRow(id: string): TrajectoryRow | undefined {
    return this.stmt('SELECT * FROM trajectories WHERE id = ?').get(id) as TrajectoryRow | undefined;
  }

  /** A trajectory's stored step rows up to maxIndex, in index order: one rowid range. */
  private stepRows(seq: number, maxIndex = STEP_KEY_SPAN - 1): StepRow[] {
    return this.stmt('SELECT * FROM steps WHERE key BETWEEN ? AND ? ORDER BY key').all(
      stepKey(seq, 0),
      stepKey(seq, Math.min(maxIndex, STEP_KEY_SPAN - 1)),
    ) as StepRow[];
  }

  private doc(hash: string): Record<string, unknown>[] | null {
    const row = this.stmt('SELECT body FROM docs WHERE hash = ?').get(hash) as { body: string } | undefined;
    return row ? JSON.parse(row.body) : null;
  }

  // ---- reads ----------------------------------------------------------------------------------

  async getTrajectory(id: string, read: TrajectoryRead = {}): Promise<Trajectory | null> {
    const n = read.inlineMetadataBytes;
    const row =
      n === undefined
        ? this.trajectoryRow(id)
        : (this.stmt(`SELECT ${compactColumnsSql(n)} FROM trajectories WHERE id = ?`).get(id) as
            | CompactTrajectoryRow
            | undefined);
    return row ? toTrajectory(row) : null;
  }

  private loadSteps(trajectoryId: string, maxIndex = STEP_KEY_SPAN - 1): Step[] {
    const row = this.stmt('SELECT seq FROM trajectories WHERE id = ?').get(trajectoryId) as
      | { seq: number }
      | undefined;
    return row ? this.decodeRange(row.seq, maxIndex) : [];
  }

  private decodeRange(seq: number, maxIndex = STEP_KEY_SPAN - 1): Step[] {
    return decodeSteps(this.stepRows(seq, maxIndex), (hash) => this.doc(hash)).steps;
  }

  async getTrajectorySteps(id: string): Promise<Step[]> {
    return this.loadSteps(id);
  }

  async getStep(trajectoryId: string, index: number): Promise<Step | null> {
    return this.loadSteps(trajectoryId, index).find((s) => s.index === index) ?? null;
  }

  /** SQLite's plan for a list query and its count (for tests that pin "no full scans"). */
  explainList(kind: 'steps', query: StepQuery): string[];
  explainList(kind: 'trajectories', query: TrajectoryQuery): string[];
  explainList(kind: 'steps' | 'trajectories', query: StepQuery | TrajectoryQuery): string[] {
    const compiled =
      kind === 'steps'
        ? [this.queries.stepCountQuery(query as StepQuery), this.queries.stepPageQuery(query as StepQuery)]
        : [this.queries.trajectoryCountQuery(query), this.queries.trajectoryPageQuery(query)];
    return compiled.flatMap((c) =>
      (
        this.db.prepare(`EXPLAIN QUERY PLAN ${c.sql}`).all(...(c.parameters as unknown[])) as {
          detail: string;
        }[]
      ).map((r) => r.detail),
    );
  }

  async listSteps(query: StepQuery): Promise<Page<Step>> {
    const total = this.runCompiled<{ n: number }>(this.queries.stepCountQuery(query))[0]!.n;
    const keys = this.runCompiled<{ key: number }>(this.queries.stepPageQuery(query)).map((r) => r.key);
    // Decode each trajectory once, up to the highest step this page needs from it.
    const needed = new Map<number, number>();
    for (const key of keys) {
      const seq = Math.floor(key / STEP_KEY_SPAN);
      needed.set(seq, Math.max(needed.get(seq) ?? 0, key - seq * STEP_KEY_SPAN));
    }
    const decoded = new Map<number, Step>();
    for (const [seq, maxIndex] of needed) {
      for (const step of this.decodeRange(seq, maxIndex)) decoded.set(stepKey(seq, step.index), step);
    }
    return { total, items: keys.map((key) => decoded.get(key)!) };
  }

  async listTrajectories(query: TrajectoryQuery): Promise<Page<Trajectory>> {
    const total = this.runCompiled<{ n: number }>(this.queries.trajectoryCountQuery(query))[0]!.n;
    const rows = this.runCompiled<TrajectoryRow>(this.queries.trajectoryPageQuery(query));
    return { total, items: rows.map(toTrajectory) };
  }

  async scanTrajectories(query: TrajectoryScan): Promise<ScanPage<Trajectory>> {
    const rows = this.runCompiled<TrajectoryRow>(this.queries.trajectoryScanQuery(query));
    const last = rows.at(-1);
    return {
      items: rows.map(toTrajectory),
      cursor: last && rows.length === query.limit ? String(last.seq) : null,
    };
  }

  /** SQLite's plan for a trajectory scan page (for tests that pin "no sort of the whole table"). */
  explainScan(query: TrajectoryScan): string[] {
    const c = this.queries.trajectoryScanQuery(query);
    return (
      this.db.prepare(`EXPLAIN QUERY PLAN ${c.sql}`).all(...(c.parameters as unknown[])) as {
        detail: string;
      }[]
    ).map((r) => r.detail);
  }

  /** Kysely builds the SQL; better-sqlite3 runs it synchronously, so reads never interleave with writes. */
  private runCompiled<T>(compiled: { sql: string; parameters: readonly unknown[] }): T[] {
    return this.stmt(compiled.sql).all(...(compiled.parameters as unknown[])) as T[];
  }

  // ---- leases ---------------------------------------------------------------------------------

  // ---- guidance holds (ActGuide-RL) -----------------------------------------------------------

  async listGroups(query: GroupQuery): Promise<Page<Group>> {
    const where: string[] = [];
    const params: unknown[] = [];
    if (query.channel !== undefined) {
      where.push('channel = ?');
      params.push(query.channel);
    }
    if (query.state !== undefined) {
      where.push('state = ?');
      params.push(query.state);
    }
    const clause = where.length > 0 ? `WHERE ${where.join(' AND ')}` : '';
    const { n } = this.stmt(`SELECT count(*) AS n FROM groups ${clause}`).get(...params) as { n: number };
    const rows = this.stmt(
      `SELECT * FROM groups ${clause} ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?`,
    ).all(...params, query.limit, query.offset) as GroupRow[];
    return { items: rows.map(toGroup), total: n };
  }

  private leaseRow(id: string): LeaseRow | undefined {
    return this.stmt('SELECT * FROM leases WHERE id = ?').get(id) as LeaseRow | undefined;
  }

  async getLease(leaseId: string): Promise<Lease | null> {
    const row = this.leaseRow(leaseId);
    return row ? toLease(row) : null;
  }

  // ---- labels ---------------------------------------------------------------------------------

  async getCurrentLabels(trajectoryId: string): Promise<CurrentLabel[]> {
    return (
      this.stmt('SELECT * FROM label_current WHERE trajectory_id = ?').all(trajectoryId) as LabelCurrentRow[]
    ).map(toCurrentLabel);
  }

  async getLabels(trajectoryId: string): Promise<Label[]> {
    return (
      this.stmt('SELECT * FROM labels WHERE trajectory_id = ? ORDER BY id').all(trajectoryId) as LabelRow[]
    ).map(toLabel);
  }

  // ---- signals --------------------------------------------------------------------------------

  async getSignals(trajectoryId: string, options: SignalQuery = {}): Promise<Signal[]> {
    const history = (
      this.stmt('SELECT * FROM signals WHERE trajectory_id = ? ORDER BY created_at, id').all(
        trajectoryId,
      ) as SignalRow[]
    ).map(toSignal);
    return options.current ? currentSignals(history) : history;
  }

  // ---- events and stats -----------------------------------------------------------------------

  async readEvents(query: EventQuery): Promise<PoolEvent[]> {
    const clauses = ['seq > ?'];
    const params: unknown[] = [query.after];
    if (query.channel !== undefined) {
      clauses.push('channel = ?');
      params.push(query.channel);
    }
    if (query.types && query.types.length > 0) {
      clauses.push(`type IN (${query.types.map(() => '?').join(', ')})`);
      params.push(...query.types);
    }
    params.push(query.limit);
    const rows = this.stmt(`SELECT * FROM events WHERE ${clauses.join(' AND ')} ORDER BY seq LIMIT ?`).all(
      ...params,
    ) as { seq: number; ts: number; type: EventType; channel: string | null; data: string }[];
    // A reader's cursor must not get ahead of what a power loss would keep (seqs would be reused).
    if (rows.length > 0) await this.wal?.durable();
    return rows.map((r) => ({
      seq: r.seq,
      ts: r.ts,
      type: r.type,
      channel: r.channel,
      data: JSON.parse(r.data),
    }));
  }

  async lastEventSeq(): Promise<number> {
    const row = this.stmt('SELECT max(seq) AS seq FROM events').get() as { seq: number | null };
    return row.seq ?? 0;
  }

  /** The dashboard's and the gym's views (store/read-models.ts). */
  readonly views = new SqliteReadModels({
    stmt: (source) => this.stmt(source),
    policyVersion: () => this.policyVersionNow(),
    lastEventSeq: () =>
      (this.stmt('SELECT max(seq) AS seq FROM events').get() as { seq: number | null }).seq ?? 0,
  });

  async describe(): Promise<StoreInfo> {
    return { kind: 'sqlite', path: this.path };
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.wal?.close();
    await this.kysely.destroy();
  }
}
