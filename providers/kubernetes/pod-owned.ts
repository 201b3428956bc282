/**
 * What goes with a pod and is owned by it (its NetworkPolicy, its htpasswd
 * Secret): made once the pod exists, one left by an earlier pod of the same
 * name replaced, deleted with the pod (and by the provider, for a cluster
 * without the garbage collector).
 */
import { httpStatus } from './classify.js';

export interface PodOwnedObject {
  create(): Promise<unknown>;
  read(): Promise<{ metadata?: { ownerReferences?: Array<{ uid: string }> } }>;
  remove(): Promise<unknown>;
}

/** Creates the object; on a 409, keeps one this pod owns and replaces another's (once). */
export async function ensurePodOwned(podUid: string | undefined, object: PodOwnedObject): Promise<void> {
  for (let attempt = 0; ; attempt++) {
    try {
      await object.create();
      return;
    } catch (err) {
      if (httpStatus(err) !== 409 || attempt > 0) throw err;
    }
    const existing = await object.read();
    if (existing.metadata?.ownerReferences?.some((r) => r.uid === podUid)) return;
    await removeIfPresent(() => object.remove());
  }
}

/** Deletes; one already gone is fine. */
export async function removeIfPresent(remove: () => Promise<unknown>): Promise<void> {
  try {
    await remove();
  } catch (err) {
    if (httpStatus(err) !== 404) throw err;
  }
}
