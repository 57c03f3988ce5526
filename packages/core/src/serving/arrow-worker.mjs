// Builds Arrow IPC streams on a worker thread. apache-arrow sets Symbol.isConcatSpreadable on its
// Vector, RecordBatch and Table prototypes when it loads, which switches off V8's fast path for
// Array.prototype.concat in the whole isolate (about 100x slower afterwards). Loading it here keeps
// the server's own thread unaffected. Plain JavaScript: no loader needed.
import { parentPort } from 'node:worker_threads';
import {
  Bool,
  Field,
  Float32,
  Float64,
  Int32,
  List,
  makeData,
  makeVector,
  Table,
  tableToIPC,
  Uint8,
  Utf8,
  vectorFromArray,
} from 'apache-arrow';

function listVector(child, column) {
  const childData = makeData({ type: child, length: column.values.length, data: column.values });
  const type = new List(new Field('item', child, false));
  return makeVector(
    makeData({
      type,
      length: column.offsets.length - 1,
      nullCount: column.nullCount,
      nullBitmap: column.nullCount > 0 ? column.validity : undefined,
      valueOffsets: column.offsets,
      child: childData,
    }),
  );
}

function vectorOf(column) {
  switch (column.kind) {
    case 'utf8':
      return vectorFromArray(column.values, new Utf8());
    case 'bool':
      return vectorFromArray(column.values, new Bool());
    case 'int32':
      return vectorFromArray(column.values, new Int32());
    case 'float32':
      return vectorFromArray(column.values, new Float32());
    case 'float64':
      return vectorFromArray(column.values, new Float64());
    case 'list_int32':
      return listVector(new Int32(), column);
    case 'list_float32':
      return listVector(new Float32(), column);
    case 'list_uint8':
      return listVector(new Uint8(), column);
    default:
      throw new Error(`unknown Arrow column kind ${column.kind}`);
  }
}

parentPort.on('message', ({ id, columns }) => {
  try {
    const vectors = {};
    for (const column of columns) vectors[column.name] = vectorOf(column);
    const bytes = tableToIPC(new Table(vectors), 'stream');
    parentPort.postMessage({ id, bytes }, [bytes.buffer]);
  } catch (error) {
    parentPort.postMessage({ id, error: String(error?.stack ?? error) });
  }
});
