/**
 * A provider config's list of named things (kvm hosts, proxmox nodes):
 * each name once, since it becomes part of providerIDs and placement.
 */
import type { z } from 'zod';

/** A zod issue at `<field>[i].name` for each entry whose name an earlier entry has (`what`: "host"). */
export function requireUniqueNames(
  ctx: z.RefinementCtx,
  items: readonly { name: string }[],
  field: string,
  what: string,
): void {
  const seen = new Map<string, number>();
  items.forEach((item, i) => {
    const first = seen.get(item.name);
    if (first !== undefined)
      ctx.addIssue({
        code: 'custom',
        path: [field, i, 'name'],
        message: `duplicate ${what} name "${item.name}" (first at ${field}[${first}])`,
      });
    else seen.set(item.name, i);
  });
}
