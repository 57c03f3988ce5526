#!/usr/bin/env node
// Runs the TypeScript CLI through tsx so the installed binary always matches the source.
import { register } from 'tsx/esm/api';

register();
const { main } = await import('../src/cli/main.ts');
await main();
