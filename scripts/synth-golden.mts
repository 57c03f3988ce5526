// Temporary (issue 41 migration): every template's tasks for many seeds, hashed, to compare before/after.
import { createHash } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { buildTask, TEMPLATES } from '../packages/gym-synth/src/index.js';

const out: Record<string, string> = {};
for (const template of TEMPLATES) {
  const h = createHash('sha256');
  for (let seed = 0; seed < 60; seed++) {
    for (let index = 0; index < 5; index++) {
      let task: unknown;
      try {
        task = buildTask(template, seed, index);
      } catch (error) {
        task = { error: String(error) };
      }
      h.update(JSON.stringify(task));
    }
  }
  out[template.id] = h.digest('hex');
}
writeFileSync(process.argv[2]!, `${JSON.stringify(out, null, 2)}\n`);
console.log(Object.keys(out).length, 'templates');
