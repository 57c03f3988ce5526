// Worker threads do not inherit the main thread's TypeScript loader: register it, then load the worker.
import { register } from 'tsx/esm/api';

register();
await import('./offload-worker.ts');
