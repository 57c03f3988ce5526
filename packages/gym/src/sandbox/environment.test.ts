import { describe, expect, it } from 'vitest';
import {
  normalizeBindTarget,
  normalizeMountDir,
  sandboxCwd,
  sandboxEnv,
  sandboxHome,
} from './environment.js';

describe('sandbox environment', () => {
  it('puts HOME where mountDir says the home is', () => {
    expect(sandboxHome('/root/.openclaw/workspace')).toBe('/root');
    expect(sandboxHome('/home/agent/work')).toBe('/home/agent');
    expect(sandboxHome('/srv/tasks/ws')).toBe('/srv/tasks');
    expect(sandboxHome('/workspace')).toBe('/tmp');
  });

  it('builds a minimal environment the caller can extend and override', () => {
    expect(sandboxEnv('/root/.openclaw/workspace', { A: '1', LC_ALL: 'en_US.UTF-8' })).toEqual({
      PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/run/stepwise/bin',
      HOME: '/root',
      LC_ALL: 'en_US.UTF-8',
      A: '1',
    });
    expect(() => sandboxEnv('/w', { 'A=B': '1' })).toThrow(TypeError);
  });

  it('accepts only absolute mount dirs outside the system directories', () => {
    expect(normalizeMountDir('/root/.openclaw/workspace/')).toBe('/root/.openclaw/workspace');
    expect(normalizeMountDir('/tmp/ws')).toBe('/tmp/ws');
    for (const bad of ['relative', '/', '/usr/ws', '/etc', '/proc/x', '/tmp', '/lib64/x']) {
      expect(() => normalizeMountDir(bad), bad).toThrow(TypeError);
    }
  });

  it('resolves a cwd against the mount dir', () => {
    expect(sandboxCwd('/w', undefined)).toBe('/w');
    expect(sandboxCwd('/w', 'sub/dir')).toBe('/w/sub/dir');
    expect(sandboxCwd('/w', '/tmp')).toBe('/tmp');
  });
  it('accepts a read-only bind target only clear of the system, /tmp and the workspace', () => {
    expect(normalizeBindTarget('/opt/tools/', '/root/.openclaw/workspace')).toBe('/opt/tools');
    for (const bad of [
      'opt',
      '/',
      '/usr/local',
      '/tmp/x',
      '/etc',
      '/root/.openclaw',
      '/root/.openclaw/workspace/x',
    ]) {
      expect(() => normalizeBindTarget(bad, '/root/.openclaw/workspace'), bad).toThrow(TypeError);
    }
  });
});
