import cliProgress from 'cli-progress';

export interface Progress {
  update(done: number, total: number): void;
  stop(): void;
}

/** A bar on a terminal; plain lines (at most one a second, and the last) when stdout is not one. */
export function progressReporter(
  label: string,
  unit: string,
  out: NodeJS.WriteStream = process.stdout,
): Progress {
  if (out.isTTY) {
    const bar = new cliProgress.SingleBar(
      {
        format: `${label} [{bar}] {value}/{total} ${unit} | {duration_formatted}`,
        stream: out,
        hideCursor: true,
      },
      cliProgress.Presets.shades_classic,
    );
    let started = false;
    return {
      update(done, total) {
        if (!started) bar.start(total, done);
        else {
          bar.setTotal(total);
          bar.update(done);
        }
        started = true;
      },
      stop() {
        if (started) bar.stop();
        started = false;
      },
    };
  }
  let lastAt = 0;
  let last: [number, number] | null = null;
  let printed: [number, number] | null = null;
  const print = ([done, total]: [number, number]) => {
    out.write(`${label}: ${done}/${total} ${unit}\n`);
    printed = [done, total];
  };
  return {
    update(done, total) {
      last = [done, total];
      const now = Date.now();
      if (now - lastAt >= 1_000) {
        lastAt = now;
        print(last);
      }
    },
    stop() {
      if (last && printed?.[0] !== last[0]) print(last);
    },
  };
}
