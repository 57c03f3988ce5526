/*
 * The package entry: what other programs import from `stepwise` (the CLI is `bin/stepwise.js`): the
 * core's public API (packages/core/src/index.ts): the SDK for agents and trainers, and the data
 * operators as plain functions.
 */

export * from '@stepwise/core';
