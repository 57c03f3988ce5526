/** The thread on which the gateway tokenises what it captures (capture-tokenizer.ts). */
import { loadQwen3Tokenizer } from '../text/tokenizer.js';
import { serveWorkerRpc } from '../util/worker-rpc.js';
import { inThreadTokenizer } from './capture-tokenizer.js';

export const tokenizeHandlers = inThreadTokenizer(loadQwen3Tokenizer);

serveWorkerRpc(tokenizeHandlers);
