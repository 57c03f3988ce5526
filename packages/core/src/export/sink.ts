import { createHash, type Hash } from 'node:crypto';
import { closeSync, openSync, renameSync, rmSync, writeSync } from 'node:fs';
import { join } from 'node:path';

export interface WrittenFile {
  name: string;
  format: 'jsonl' | 'parquet';
  /** Lines (JSONL) or rows (Parquet). */
  records: number;
  bytes: number;
  sha256: string;
}

/**
 * A data file being written: bytes go to `<name>.partial` and are hashed on the way, so the digest
 * costs no second read; `commit` renames it into place, `discard` removes it. Writes are
 * synchronous and buffered (an export is one sequential writer).
 */
export class FileSink {
  private readonly fd: number;
  private readonly hash: Hash = createHash('sha256');
  private readonly partialPath: string;
  private pending: string[] = [];
  private pendingChars = 0;
  private done = false;
  bytes = 0;
  records = 0;

  constructor(
    private readonly dir: string,
    readonly name: string,
    private readonly format: WrittenFile['format'],
    private readonly flushChars = 1 << 20,
  ) {
    this.partialPath = join(dir, `${name}.partial`);
    this.fd = openSync(this.partialPath, 'w');
  }

  /** Appends one JSON value as a line. */
  writeLine(value: unknown): void {
    const line = `${JSON.stringify(value)}\n`;
    this.pending.push(line);
    this.pendingChars += line.length;
    this.records++;
    if (this.pendingChars >= this.flushChars) this.flushText();
  }

  private flushText(): void {
    if (this.pending.length === 0) return;
    this.writeBytes(Buffer.from(this.pending.join(''), 'utf8'));
    this.pending = [];
    this.pendingChars = 0;
  }

  writeBytes(bytes: Uint8Array): void {
    this.hash.update(bytes);
    let offset = 0;
    while (offset < bytes.length) offset += writeSync(this.fd, bytes, offset, bytes.length - offset);
    this.bytes += bytes.length;
  }

  commit(): WrittenFile {
    this.flushText();
    closeSync(this.fd);
    this.done = true;
    renameSync(this.partialPath, join(this.dir, this.name));
    return {
      name: this.name,
      format: this.format,
      records: this.records,
      bytes: this.bytes,
      sha256: this.hash.digest('hex'),
    };
  }

  discard(): void {
    if (this.done) return;
    this.done = true;
    closeSync(this.fd);
    rmSync(this.partialPath, { force: true });
  }
}
