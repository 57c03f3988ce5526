/*
 * A small RFC 4180 CSV reader: comma-separated, fields optionally in double quotes (`""` is a quote;
 * commas and line breaks may appear inside quotes), rows end with LF, CRLF or CR. Blank lines are
 * skipped, as Python's csv.DictReader does. A quote opened and never closed, or text after a closing
 * quote, is an error: a verifier must not guess what a broken file meant.
 */

import { StepwiseError } from '@stepwise/core';

export class CsvError extends StepwiseError {
  override readonly name = 'CsvError';
  constructor(
    message: string,
    /** 1-based physical line where the problem is. */
    readonly line: number,
  ) {
    super(`line ${line}: ${message}`, 422, 'invalid_csv');
  }
}

interface CsvRecord {
  fields: string[];
  /** 1-based physical line where the record starts. */
  line: number;
}

function readRecords(input: string): CsvRecord[] {
  const text = input.startsWith('\uFEFF') ? input.slice(1) : input;
  const records: CsvRecord[] = [];
  let fields: string[] = [];
  let field = '';
  let inRecord = false;
  let recordLine = 1;
  let line = 1;
  const endRecord = () => {
    if (inRecord) {
      fields.push(field);
      records.push({ fields, line: recordLine });
    }
    fields = [];
    field = '';
    inRecord = false;
  };
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    if (c === '\r' || c === '\n') {
      endRecord();
      i += c === '\r' && text[i + 1] === '\n' ? 2 : 1;
      line++;
      continue;
    }
    if (!inRecord) {
      inRecord = true;
      recordLine = line;
    }
    if (c === ',') {
      fields.push(field);
      field = '';
      i++;
    } else if (c === '"' && field === '') {
      const openedAt = line;
      i++;
      for (;;) {
        if (i >= text.length) throw new CsvError('a quoted field is never closed', openedAt);
        const q = text[i]!;
        if (q === '"' && text[i + 1] === '"') {
          field += '"';
          i += 2;
        } else if (q === '"') {
          i++;
          break;
        } else {
          if (q === '\n' || (q === '\r' && text[i + 1] !== '\n')) line++;
          field += q;
          i++;
        }
      }
      const after = text[i];
      if (after !== undefined && after !== ',' && after !== '\n' && after !== '\r') {
        throw new CsvError('unexpected text after a closing quote', line);
      }
    } else {
      // A quote inside an unquoted field is kept as a character (as Python's csv module does).
      field += c;
      i++;
    }
  }
  endRecord();
  return records;
}

/** All records of a CSV text (a leading BOM is ignored). */
export function parseCsvRecords(text: string): string[][] {
  return readRecords(text).map((r) => r.fields);
}

export interface CsvTable {
  header: string[];
  rows: string[][];
}

/** A CSV with a header row; every row must have as many fields as the header. */
export function parseCsvTable(text: string): CsvTable {
  const records = readRecords(text);
  const header = records[0]?.fields;
  if (!header) throw new CsvError('no header row', 1);
  for (const record of records.slice(1)) {
    const n = record.fields.length;
    if (n !== header.length) {
      throw new CsvError(`a row has ${n} fields, the header has ${header.length}`, record.line);
    }
  }
  return { header, rows: records.slice(1).map((r) => r.fields) };
}
