// The seccomp filter bwrap loads: no process in the sandbox may create a user namespace (else `unshare -Ur`
// gives uid 0 with every capability), use io_uring (a large kernel surface that also bypasses seccomp
// for the operations it runs; ENOSYS, so programs fall back to plain syscalls), or the kernel keyring
// (keyctl, add_key, request_key: shared with the host's uid; EPERM as Docker's profile). Classic BPF
// built here, so nothing native is needed.
// Per-ABI rules: docs/gym-sandbox.md#how-it-is-isolated

const CLONE_NEWUSER = 0x1000_0000;
const EPERM = 1;
const ENOSYS = 38;

const RET_ALLOW = 0x7fff_0000;
const RET_ERRNO = 0x0005_0000;

// struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6] (little endian).
const OFFSET_NR = 0;
const OFFSET_ARCH = 4;
const OFFSET_ARG0_LOW = 16;

// BPF opcodes: class | size/op | source.
const LD_W_ABS = 0x00 | 0x00 | 0x20;
const ALU_AND_K = 0x04 | 0x50 | 0x00;
const JMP_JEQ_K = 0x05 | 0x10 | 0x00;
const JMP_JSET_K = 0x05 | 0x40 | 0x00;
const RET_K = 0x06 | 0x00 | 0x00;

/** io_uring's three syscalls have the same numbers on every ABI (added after the tables were unified). */
const IO_URING = [425, 426, 427] as const;

/** x32 syscalls are x86_64's numbers with this bit set; unshare, clone and clone3 are shared. */
const X32_SYSCALL_BIT = 0x4000_0000;

interface Abi {
  name: string;
  /** AUDIT_ARCH_* of <linux/audit.h>. */
  audit: number;
  unshare: number;
  clone: number;
  clone3: number;
  /** io_uring_setup, io_uring_enter, io_uring_register. */
  ioUring: readonly number[];
  /** keyctl, add_key, request_key. */
  keyring: readonly number[];
  /** Clear the x32 bit before comparing numbers. */
  x32?: boolean;
}

export const ABIS: Readonly<Record<'x64' | 'arm64', readonly Abi[]>> = {
  x64: [
    {
      name: 'x86_64',
      audit: 0xc000_003e,
      unshare: 272,
      clone: 56,
      clone3: 435,
      ioUring: IO_URING,
      keyring: [250, 248, 249],
      x32: true,
    },
    {
      name: 'i386',
      audit: 0x4000_0003,
      unshare: 310,
      clone: 120,
      clone3: 435,
      ioUring: IO_URING,
      keyring: [288, 286, 287],
    },
  ],
  arm64: [
    {
      name: 'aarch64',
      audit: 0xc000_00b7,
      unshare: 97,
      clone: 220,
      clone3: 435,
      ioUring: IO_URING,
      keyring: [219, 217, 218],
    },
    {
      name: 'arm',
      audit: 0x4000_0028,
      unshare: 337,
      clone: 120,
      clone3: 435,
      ioUring: IO_URING,
      keyring: [311, 309, 310],
    },
  ],
};

type Instruction =
  | { op: number; k: number }
  | { op: number; k: number; jt: string | 0; jf: string | 0 }
  | { label: string };

/** The filter for the host's architecture, as the bytes of a struct sock_filter array; null: none known. */
export function noUserNamespaceFilter(arch: string = process.arch): Buffer | null {
  const abis = ABIS[arch as keyof typeof ABIS];
  return abis ? assemble(program(abis)) : null;
}

function program(abis: readonly Abi[]): Instruction[] {
  const code: Instruction[] = [{ op: LD_W_ABS, k: OFFSET_ARCH }];
  for (const abi of abis) code.push({ op: JMP_JEQ_K, k: abi.audit, jt: abi.name, jf: 0 });
  code.push({ op: RET_K, k: RET_ERRNO | ENOSYS });
  for (const abi of abis) {
    code.push({ label: abi.name }, { op: LD_W_ABS, k: OFFSET_NR });
    if (abi.x32) code.push({ op: ALU_AND_K, k: ~X32_SYSCALL_BIT >>> 0 });
    code.push({ op: JMP_JEQ_K, k: abi.clone3, jt: 'enosys', jf: 0 });
    for (const nr of abi.ioUring) code.push({ op: JMP_JEQ_K, k: nr, jt: 'enosys', jf: 0 });
    for (const nr of abi.keyring) code.push({ op: JMP_JEQ_K, k: nr, jt: 'eperm', jf: 0 });
    code.push(
      { op: JMP_JEQ_K, k: abi.unshare, jt: 'flags', jf: 0 },
      { op: JMP_JEQ_K, k: abi.clone, jt: 'flags', jf: 'allow' },
    );
  }
  // unshare(flags) and clone(flags, ...) take the flags first on every ABI above.
  code.push(
    { label: 'flags' },
    { op: LD_W_ABS, k: OFFSET_ARG0_LOW },
    { op: JMP_JSET_K, k: CLONE_NEWUSER, jt: 'eperm', jf: 'allow' },
    { label: 'allow' },
    { op: RET_K, k: RET_ALLOW },
    { label: 'eperm' },
    { op: RET_K, k: RET_ERRNO | EPERM },
    { label: 'enosys' },
    { op: RET_K, k: RET_ERRNO | ENOSYS },
  );
  return code;
}

/** Resolves labels to forward jump offsets and encodes struct sock_filter { u16 code; u8 jt, jf; u32 k }. */
function assemble(code: Instruction[]): Buffer {
  const at = new Map<string, number>();
  const instructions: Exclude<Instruction, { label: string }>[] = [];
  for (const item of code) {
    if ('label' in item) at.set(item.label, instructions.length);
    else instructions.push(item);
  }
  const out = Buffer.alloc(instructions.length * 8);
  instructions.forEach((ins, i) => {
    const offset = (target: string | 0 | undefined) => {
      if (target === undefined || target === 0) return 0;
      const distance = at.get(target)! - i - 1;
      if (!(distance >= 0 && distance < 256)) throw new Error(`seccomp: bad jump to ${target}`);
      return distance;
    };
    out.writeUInt16LE(ins.op, i * 8);
    out.writeUInt8('jt' in ins ? offset(ins.jt) : 0, i * 8 + 2);
    out.writeUInt8('jf' in ins ? offset(ins.jf) : 0, i * 8 + 3);
    out.writeUInt32LE(ins.k >>> 0, i * 8 + 4);
  });
  return out;
}
