/**
 * One proxmox create in a process of its own, for the test that kills the
 * worker for real (SIGKILL) while PVE runs the clone:
 * `node --import tsx tests/helpers/proxmox-create-child.ts '<json>'`.
 * Prints `CREATE-STARTED` before calling create and `CREATE-RETURNED <id>`
 * if it ever returns (the test kills it first). Logs go to stderr.
 * Import only its types from tests: importing the module runs it.
 */
import { pino } from 'pino';
import { proxmoxConfigSchema } from '../../providers/proxmox/config.js';
import { createProxmoxProvider } from '../../providers/proxmox/provider.js';
import type { CreateRequest } from '../../providers/types.js';

export interface CreateChildArgs {
  /** The `proxmox:` block, as the config file holds it. */
  config: unknown;
  request: CreateRequest;
}

async function main(args: CreateChildArgs): Promise<void> {
  const provider = createProxmoxProvider({
    name: 'pve',
    config: proxmoxConfigSchema.parse(args.config),
    logger: pino({ level: 'warn' }, pino.destination(2)),
  });
  process.stdout.write('CREATE-STARTED\n');
  const id = await provider.create(args.request, new AbortController().signal);
  process.stdout.write(`CREATE-RETURNED ${id}\n`);
}

main(JSON.parse(process.argv[2] ?? '{}') as CreateChildArgs).catch((err: unknown) => {
  process.stderr.write(`create child failed: ${String(err)}\n`);
  process.exit(1);
});
