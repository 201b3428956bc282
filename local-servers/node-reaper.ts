/**
 * Runs detached beside a node (node.ts starts it) and undoes the node when
 * its owner dies, however it dies: the owner holds the write end of this
 * process's stdin, and the kernel closes it on exit, SIGKILL included. The
 * node's servers die with their owner (PR_SET_PDEATHSIG), but its shims,
 * pods, mounts, bridge and cgroups do not; this is what removes them.
 *
 * usage: node-reaper <node data dir> <owner pid>
 */
import { reapNode } from './node.js';

const [dataDir, owner] = process.argv.slice(2);
if (!dataDir || !owner || !/^[0-9]+$/.test(owner)) {
  process.stderr.write('usage: node-reaper <node data dir> <owner pid>\n');
  process.exit(2);
}
let done = false;
const reap = () => {
  if (done) return;
  done = true;
  // Only the owner's node: a new owner may already have started another in the directory.
  reapNode(dataDir, { owner: Number(owner) }).then(
    () => process.exit(0),
    (error: unknown) => {
      process.stderr.write(`node-reaper: ${String(error)}\n`);
      process.exit(1);
    },
  );
};
process.stdin.on('end', reap);
process.stdin.on('close', reap);
process.stdin.on('error', reap);
process.stdin.resume();
