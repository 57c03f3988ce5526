import { describe, expect, it } from 'vitest';
import { ABIS, noUserNamespaceFilter } from './seccomp.js';

const ALLOW = 0x7fff_0000;
const EPERM = 0x0005_0001;
const ENOSYS = 0x0005_0026;
const CLONE_NEWUSER = 0x1000_0000;

/** A classic-BPF interpreter for the instructions the filter uses, over one struct seccomp_data. */
function run(filter: Buffer, arch: number, nr: number, arg0 = 0): number {
  const data = Buffer.alloc(64);
  data.writeInt32LE(nr | 0, 0);
  data.writeUInt32LE(arch, 4);
  data.writeUInt32LE(arg0 >>> 0, 16);
  let a = 0;
  for (let pc = 0; pc < filter.length / 8; pc++) {
    const code = filter.readUInt16LE(pc * 8);
    const jt = filter.readUInt8(pc * 8 + 2);
    const jf = filter.readUInt8(pc * 8 + 3);
    const k = filter.readUInt32LE(pc * 8 + 4);
    if (code === 0x20) a = data.readUInt32LE(k);
    else if (code === 0x54) a = (a & k) >>> 0;
    else if (code === 0x15) pc += a === k ? jt : jf;
    else if (code === 0x45) pc += (a & k) !== 0 ? jt : jf;
    else if (code === 0x06) return k;
    else throw new Error(`unexpected opcode ${code}`);
  }
  throw new Error('fell off the end of the filter');
}

describe('noUserNamespaceFilter', () => {
  for (const [host, abis] of Object.entries(ABIS)) {
    const filter = noUserNamespaceFilter(host)!;
    for (const abi of abis) {
      it(`${host}, ${abi.name}: refuses new user namespaces and clone3, allows the rest`, () => {
        expect(run(filter, abi.audit, abi.unshare, CLONE_NEWUSER)).toBe(EPERM);
        expect(run(filter, abi.audit, abi.unshare, CLONE_NEWUSER | 0x0002_0000)).toBe(EPERM);
        expect(run(filter, abi.audit, abi.clone, CLONE_NEWUSER | 17)).toBe(EPERM);
        expect(run(filter, abi.audit, abi.clone3, 0)).toBe(ENOSYS);
        // Other namespaces, plain forks and threads, and unrelated syscalls go through.
        expect(run(filter, abi.audit, abi.unshare, 0x0400_0000)).toBe(ALLOW);
        expect(run(filter, abi.audit, abi.clone, 17)).toBe(ALLOW);
        expect(run(filter, abi.audit, abi.clone, 0x003d_0f00)).toBe(ALLOW);
        expect(run(filter, abi.audit, 0, CLONE_NEWUSER)).toBe(ALLOW);
        expect(run(filter, abi.audit, 39, CLONE_NEWUSER)).toBe(ALLOW);
        // io_uring: ENOSYS (programs fall back); the kernel keyring: EPERM.
        for (const nr of [425, 426, 427]) expect(run(filter, abi.audit, nr)).toBe(ENOSYS);
        for (const nr of abi.keyring) expect(run(filter, abi.audit, nr)).toBe(EPERM);
      });
    }
    it(`${host}: an ABI it does not know gets ENOSYS for everything`, () => {
      expect(run(filter, 0xc000_00f3 /* riscv64 */, 39)).toBe(ENOSYS);
    });
  }

  it('x86_64: covers x32 syscall numbers too', () => {
    const filter = noUserNamespaceFilter('x64')!;
    const x86 = ABIS.x64[0]!;
    expect(run(filter, x86.audit, 0x4000_0000 | x86.unshare, CLONE_NEWUSER)).toBe(EPERM);
    expect(run(filter, x86.audit, 0x4000_0000 | x86.clone, CLONE_NEWUSER)).toBe(EPERM);
    expect(run(filter, x86.audit, 0x4000_0000 | x86.clone3)).toBe(ENOSYS);
    expect(run(filter, x86.audit, 0x4000_0000 | 39)).toBe(ALLOW);
    expect(run(filter, x86.audit, 0x4000_0000 | 425)).toBe(ENOSYS);
    expect(run(filter, x86.audit, 0x4000_0000 | 250)).toBe(EPERM);
  });

  it('has no filter for other architectures', () => {
    expect(noUserNamespaceFilter('riscv64')).toBeNull();
  });
});
