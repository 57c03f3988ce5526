// The first process inside the sandbox. Python: the sandbox is certain to have it, and one small process
// does what no shell can. Its duties and protocol: docs/gym-sandbox.md#how-it-is-isolated ("The supervisor").

export interface SupervisorConfig {
  statusFd: number;
  controlFd: number;
  cwd: string;
  /** Drop to this uid/gid (set when the host runs as root); absent: keep the sandbox's uid. */
  uid?: number;
  gid?: number;
  limits: { cpu: number; as: number; nproc: number; fsize: number };
  gateway?: { port: number; socket: string };
}

export const SUPERVISOR_PY = String.raw`
import json, os, signal, socket, subprocess, sys, threading, time

cfg = json.loads(sys.argv[1])
command = sys.argv[2]
STATUS = cfg['statusFd']
CONTROL = cfg['controlFd']
ME = os.getpid()
lock = threading.Lock()
state = {'peak': 0, 'done': False}


def report(event):
    data = (json.dumps(event) + '\n').encode()
    with lock:
        try:
            while data:
                data = data[os.write(STATUS, data):]
        except OSError:
            pass


def count_tasks():
    total = 0
    try:
        names = os.listdir('/proc')
    except OSError:
        return 0
    for name in names:
        if not name.isdigit():
            continue
        pid = int(name)
        if pid == 1 or pid == ME:
            continue
        try:
            with open('/proc/%d/stat' % pid, 'rb') as f:
                raw = f.read()
            total += int(raw[raw.rindex(b')') + 2:].split()[17])
        except (FileNotFoundError, ProcessLookupError):
            pass
        except (OSError, ValueError, IndexError):
            total += 1
    return total


def note_peak():
    n = count_tasks()
    if n > state['peak']:
        state['peak'] = n


def sample():
    while not state['done']:
        note_peak()
        time.sleep(0.05)


def watch_control():
    while True:
        try:
            data = os.read(CONTROL, 64)
        except InterruptedError:
            continue
        except OSError:
            return
        if not data:
            return
        if b'T' in data:
            note_peak()
            try:
                os.kill(-1, signal.SIGTERM)
            except OSError:
                pass


def pump(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass


def bridge(conn, path):
    upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        upstream.connect(path)
    except OSError:
        conn.close()
        upstream.close()
        return
    back = threading.Thread(target=pump, args=(upstream, conn), daemon=True)
    back.start()
    pump(conn, upstream)
    back.join()
    conn.close()
    upstream.close()


def serve(server, path):
    while True:
        try:
            conn, _ = server.accept()
        except InterruptedError:
            continue
        except OSError:
            time.sleep(0.05)
            continue
        threading.Thread(target=bridge, args=(conn, path), daemon=True).start()


def ignore(signum, frame):
    pass


# A handler, not SIG_IGN: handlers reset to the default in the command, SIG_IGN would be inherited.
for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
    signal.signal(s, ignore)

gateway = cfg.get('gateway')
if gateway:
    try:
        server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        server.bind(('127.0.0.1', gateway['port']))
        server.listen(128)
    except OSError as e:
        report({'event': 'failed', 'reason': 'gateway bridge cannot listen on 127.0.0.1:%d: %s' % (gateway['port'], e.strerror)})
        os._exit(125)
    threading.Thread(target=serve, args=(server, gateway['socket']), daemon=True).start()

threading.Thread(target=watch_control, daemon=True).start()
threading.Thread(target=sample, daemon=True).start()

# Empty the capability bounding set the command inherits (it already gets no_new_privs, nosuid
# mounts and, as another uid, no capabilities: this is one more wall).
if cfg.get('uid') is not None:
    try:
        import ctypes
        libc = ctypes.CDLL(None, use_errno=True)
        for cap in range(64):
            libc.prctl(24, cap, 0, 0, 0)  # PR_CAPBSET_DROP
    except Exception:
        pass

lim = cfg['limits']
argv = [
    '/usr/bin/prlimit',
    '--cpu=%d:%d' % (lim['cpu'], lim['cpu'] + 1),
    '--as=%d' % lim['as'],
    '--nproc=%d' % lim['nproc'],
    '--fsize=%d' % lim['fsize'],
    '--core=0',
    '--',
    '/bin/bash', '-c', command,
]
options = {'cwd': cfg['cwd'], 'start_new_session': True, 'close_fds': True}
if cfg.get('uid') is not None:
    options.update(user=cfg['uid'], group=cfg['gid'], extra_groups=[])

try:
    child = subprocess.Popen(argv, **options)
except OSError as e:
    if e.filename == cfg['cwd']:
        report({'event': 'started'})
        sys.stderr.write('bash: line 1: cd: %s: %s\n' % (cfg['cwd'], e.strerror))
        sys.stderr.flush()
        report({'event': 'exit', 'code': 1, 'signal': None, 'cpu': 0, 'peakTasks': 0})
        os._exit(1)
    report({'event': 'failed', 'reason': 'cannot start the command: %s' % e})
    os._exit(125)
report({'event': 'started'})

while True:
    try:
        _, status, usage = os.wait4(child.pid, 0)
        break
    except InterruptedError:
        continue
child.returncode = 0
state['done'] = True
note_peak()
if os.WIFSIGNALED(status):
    number = os.WTERMSIG(status)
    try:
        name = signal.Signals(number).name
    except ValueError:
        name = 'SIG%d' % number
    code, exit_status = None, 128 + number
else:
    name = None
    code = exit_status = os.WEXITSTATUS(status)
report({'event': 'exit', 'code': code, 'signal': name, 'cpu': usage.ru_utime + usage.ru_stime, 'peakTasks': state['peak']})
os._exit(exit_status)
`;
