import type Database from 'better-sqlite3';

/** `prepare` with a cache: each SQL text is compiled once per connection and reused. */
export function statementCache(db: Database.Database): (source: string) => Database.Statement {
  const statements = new Map<string, Database.Statement>();
  return (source) => {
    let statement = statements.get(source);
    if (!statement) {
      statement = db.prepare(source);
      statements.set(source, statement);
    }
    return statement;
  };
}
