import Database from 'better-sqlite3';
import { describe, expect, it } from 'vitest';
import { statementCache } from './statements.js';

describe('statement cache', () => {
  const db = new Database(':memory:');
  db.exec(`CREATE TABLE t (id TEXT PRIMARY KEY, n INTEGER, x REAL, b BLOB, note TEXT);
           INSERT INTO t VALUES ('a', 1, 0.5, x'0102', NULL), ('b', -7, NULL, NULL, 'it''s "quoted"');`);
  const stmt = statementCache(db);

  it('reads the same rows as the driver, column for column', () => {
    for (const sql of [
      'SELECT * FROM t ORDER BY id',
      'SELECT note, id AS "odd name", n + 1 AS "n+1" FROM t ORDER BY id',
    ]) {
      expect(stmt(sql).all()).toEqual(db.prepare(sql).all());
      expect(stmt(sql).get()).toEqual(db.prepare(sql).get());
    }
    expect(stmt('SELECT * FROM t WHERE id = ?').get('zz')).toBeUndefined();
  });

  it('keeps the later value of a repeated column name, as the driver does', () => {
    const sql = 'SELECT 1 AS v, 2 AS v';
    expect(stmt(sql).get()).toEqual(db.prepare(sql).get());
    const proto = stmt('SELECT 3 AS "__proto__"').get() as Record<string, unknown>;
    expect(Object.getPrototypeOf(proto)).toBe(Object.prototype);
    expect(Object.getOwnPropertyDescriptor(proto, '__proto__')?.value).toBe(3);
  });

  it('compiles each text once and refuses row reads on a statement that returns none', () => {
    expect(stmt('SELECT * FROM t')).toBe(stmt('SELECT * FROM t'));
    const insert = stmt('INSERT INTO t (id) VALUES (?)');
    expect(insert.run('c').changes).toBe(1);
    expect(() => insert.get('d')).toThrow(/returns no rows/);
  });
});
