/**
 * The provider conformance suite: the contract's §11 list, run against any
 * provider. A provider's test file calls
 *
 *   describeProviderConformance('local', async () => ({ provider, logLines, hooks: {...}, cleanup }));
 *
 * Tests that need a backend-specific manipulation (writing an unknown state,
 * an unmarked instance, a stalled backend call) take it from `hooks`; a
 * missing hook makes that test show as *skipped* with the hook's name, never
 * as passed.
 */
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { classOf, ProviderError } from '../../providers/errors.js';
import { instanceNameFromUid } from '../../providers/names.js';
import type {
  CreateRequest,
  Instance,
  Placement,
  Provider,
  ProviderOperation,
} from '../../providers/types.js';

export interface ConformanceHooks {
  /** Make the backend report a state this provider has never heard of, for instance `id`. */
  setUnknownState?(id: string): Promise<void>;
  /** Make the backend report instance `id` as running but without any address. */
  setRunningWithoutIp?(id: string): Promise<void>;
  /** Put an instance named `name` in the backend without the managed mark; returns its providerID. */
  createUnmarked?(name: string): Promise<string>;
  /** Put an instance named `name` in the backend with the managed mark and an empty UID mark; returns its providerID. */
  createMarkedWithEmptyUid?(name: string): Promise<string>;
  /** Change the UID mark and creation time of instance `id` directly in the backend. */
  rewriteMarks?(id: string, marks: { uid: string; createdAt: Date }): Promise<void>;
  /** Make backend calls about `id` hang until the returned release function is called. */
  stall?(id: string): Promise<() => Promise<void>>;
  /** Leave instance `id` in the middle of an asynchronous delete (backends whose delete returns early). */
  startDeleteInProgress?(id: string): Promise<void>;
}

export interface ConformanceSubject {
  provider: Provider;
  /** Every log line the provider wrote so far (the suite looks for the sentinel in them). */
  logLines(): string[];
  hooks: ConformanceHooks;
  /** More IDs this provider can never resolve (generic ones are always tried). */
  malformedIds?: string[];
  /** Port for created instances. */
  port?: number;
  /** Placement for created instances (default none; VM providers require some fields). */
  placement?: Placement;
  /** Upper bound for an instance to become Running. Default 30 s. */
  runningWithinMs?: number;
  cleanup(): Promise<void>;
}

const GENERIC_MALFORMED_IDS = ['', '/', 'no-separator', '../../etc/passwd', 'a/b/c/d/e/f', ' x/y ', 'x/\n'];

function live(): AbortSignal {
  return new AbortController().signal;
}

function aborted(): AbortSignal {
  const c = new AbortController();
  c.abort();
  return c.signal;
}

/** Awaits a rejection and returns it; fails the test when the promise resolves. */
async function rejectionOf(p: Promise<unknown>): Promise<unknown> {
  try {
    await p;
  } catch (err) {
    return err;
  }
  throw new Error('expected a rejection, got a value');
}

function expectProviderError(err: unknown, cls: string, op: ProviderOperation, providerName: string): void {
  expect(err).toBeInstanceOf(ProviderError);
  const e = err as ProviderError;
  expect(e.errorClass).toBe(cls);
  expect(classOf(e)).toBe(cls);
  expect(e.operation).toBe(op);
  expect(e.provider).toBe(providerName);
}

export function describeProviderConformance(name: string, factory: () => Promise<ConformanceSubject>): void {
  describe(`provider conformance: ${name}`, () => {
    let subject: ConformanceSubject;
    let provider: Provider;
    const created = new Set<string>();
    const sentinel = `sentinel-${randomUUID()}`;

    /** This run's installation mark: every instance the suite creates carries it. */
    const installation = `conformance-${randomUUID().slice(0, 8)}`;
    const request = (overrides: Partial<CreateRequest> = {}): CreateRequest => {
      const uid = overrides.uid ?? randomUUID();
      return {
        name: instanceNameFromUid(uid),
        uid,
        namespace: 'conformance',
        proxyName: `p-${uid.slice(0, 8)}`,
        placement: { ...subject.placement },
        cloudInit: `#cloud-config\n# ${sentinel}\n`,
        port: subject.port ?? 3128,
        installation,
        ...overrides,
      };
    };

    const create = async (req: CreateRequest): Promise<string> => {
      const id = await provider.create(req, live());
      created.add(id);
      return id;
    };

    const waitRunning = async (id: string): Promise<Instance> => {
      const deadline = Date.now() + (subject.runningWithinMs ?? 30_000);
      let last: Instance | undefined;
      while (Date.now() < deadline) {
        last = await provider.get(id, live());
        if (last.state === 'Running') return last;
        expect(['Provisioning', 'Running']).toContain(last.state);
        await new Promise((r) => setTimeout(r, 100));
      }
      throw new Error(`instance ${id} not Running in time; last state ${last?.state ?? 'none'}`);
    };

    /**
     * get after a delete: at once for a provider whose delete waits; a
     * provider whose delete returns early (contract §4.3) may show the
     * instance (never an error) until it is gone, repeating delete as the
     * reconciler does. Returns the NotFound error.
     */
    const goneAfterDelete = async (id: string): Promise<unknown> => {
      const deadline = Date.now() + (subject.runningWithinMs ?? 30_000);
      for (;;) {
        let got: Instance;
        try {
          got = await provider.get(id, live());
        } catch (err) {
          return err;
        }
        expect(got.id).toBe(id);
        if (Date.now() > deadline) throw new Error(`instance ${id} still there after delete (${got.state})`);
        await new Promise((r) => setTimeout(r, 50));
        await provider.delete(id, live());
      }
    };

    // Only this run's instances count: another run on the same backend (two
    // test runs on one libvirtd) or a user's own instances there cannot move it.
    const count = async (): Promise<number> =>
      (await provider.listByTag(live())).filter((i) => i.installation === installation).length;

    /** Every error the suite provoked, for the sentinel check. */
    const errors: unknown[] = [];

    beforeAll(async () => {
      subject = await factory();
      provider = subject.provider;
    });

    afterAll(async () => {
      for (const id of created) await provider.delete(id, live()).catch(() => undefined);
      await subject?.cleanup();
    });

    it('create is idempotent by name: a repeat returns the same id and creates nothing', async () => {
      const req = request();
      const before = await count();
      const id = await create(req);
      expect(await count()).toBe(before + 1);
      expect(await create(req)).toBe(id);
      expect(await count()).toBe(before + 1);
    });

    it('concurrent creates for one name make one instance', async () => {
      const req = request();
      const before = await count();
      const ids = await Promise.all([create(req), create(req), create(req)]);
      expect(new Set(ids).size).toBe(1);
      expect(await count()).toBe(before + 1);
    });

    it('a freshly created instance is never Stopped, and Running carries an IP', async () => {
      const id = await create(request());
      const first = await provider.get(id, live());
      expect(['Provisioning', 'Running']).toContain(first.state);
      const running = await waitRunning(id);
      expect(running.ip).toBeTruthy();
    });

    it('get after delete is NotFound, and delete twice succeeds', async () => {
      const id = await create(request());
      await provider.delete(id, live());
      errors.push(await goneAfterDelete(id));
      expectProviderError(errors.at(-1), 'NotFound', 'get', provider.name);
      await provider.delete(id, live());
      expectProviderError(await rejectionOf(provider.get(id, live())), 'NotFound', 'get', provider.name);
    });

    it('a malformed id is Permanent from get and from delete', async () => {
      for (const id of [...GENERIC_MALFORMED_IDS, ...(subject.malformedIds ?? [])]) {
        const g = await rejectionOf(provider.get(id, live()));
        expectProviderError(g, 'Permanent', 'get', provider.name);
        const d = await rejectionOf(provider.delete(id, live()));
        expectProviderError(d, 'Permanent', 'delete', provider.name);
        errors.push(g, d);
      }
    });

    it('UID and CreatedAt come back from the backend', async () => {
      const req = request();
      const before = Date.now();
      const id = await create(req);
      const after = Date.now();
      const got = await provider.get(id, live());
      expect(got.uid).toBe(req.uid);
      expect(got.createdAt).toBeInstanceOf(Date);
      // Backends store seconds or milliseconds: allow one second of rounding down.
      expect(got.createdAt!.getTime()).toBeGreaterThanOrEqual(before - 1000);
      expect(got.createdAt!.getTime()).toBeLessThanOrEqual(after);
      const listed = (await provider.listByTag(live())).find((i) => i.id === id);
      expect(listed?.uid).toBe(req.uid);
      expect(listed?.createdAt?.getTime()).toBe(got.createdAt!.getTime());
    });

    const rewrite = subject_hook('rewriteMarks');
    rewrite('UID and CreatedAt are read from the backend on every get, not remembered', async (hooks) => {
      const id = await create(request());
      const uid = randomUUID();
      const createdAt = new Date('2001-02-03T04:05:06Z');
      await hooks.rewriteMarks!(id, { uid, createdAt });
      const got = await provider.get(id, live());
      expect(got.uid).toBe(uid);
      expect(got.createdAt?.toISOString()).toBe(createdAt.toISOString());
      const listed = (await provider.listByTag(live())).find((i) => i.id === id);
      expect(listed?.uid).toBe(uid);
    });

    const unknownState = subject_hook('setUnknownState');
    unknownState('an unknown backend state maps to Stopped', async (hooks) => {
      const id = await create(request());
      await hooks.setUnknownState!(id);
      const got = await provider.get(id, live());
      expect(got.state).toBe('Stopped');
      expect(got.ip).toBeFalsy();
    });

    const noIp = subject_hook('setRunningWithoutIp');
    noIp('running without an IP is Provisioning', async (hooks) => {
      const id = await create(request());
      await waitRunning(id);
      await hooks.setRunningWithoutIp!(id);
      const got = await provider.get(id, live());
      expect(got.state).toBe('Provisioning');
      expect(got.ip).toBeFalsy();
    });

    const unmarked = subject_hook('createUnmarked', 'createMarkedWithEmptyUid');
    unmarked(
      'listByTag excludes unmarked instances and lists marked ones with an empty UID',
      async (hooks) => {
        const markedReq = request();
        const markedId = await create(markedReq);
        const unmarkedId = await hooks.createUnmarked!(instanceNameFromUid(randomUUID()));
        created.add(unmarkedId);
        const emptyUidId = await hooks.createMarkedWithEmptyUid!(instanceNameFromUid(randomUUID()));
        created.add(emptyUidId);
        const listed = await provider.listByTag(live());
        const ids = listed.map((i) => i.id);
        expect(ids).toContain(markedId);
        expect(ids).not.toContain(unmarkedId);
        expect(listed.find((i) => i.id === emptyUidId)?.uid).toBe('');
        expect(listed.find((i) => i.id === markedId)?.uid).toBe(markedReq.uid);
      },
    );

    it('create does not adopt a same-named instance owned by another UID (Permanent), and leaves it alone', async () => {
      const owner = request();
      const id = await create(owner);
      const intruder = request({ uid: randomUUID(), name: owner.name });
      const err = await rejectionOf(provider.create(intruder, live()));
      errors.push(err);
      expectProviderError(err, 'Permanent', 'create', provider.name);
      expect((err as ProviderError).instance).toContain(owner.name);
      expect((await provider.get(id, live())).uid).toBe(owner.uid);
    });

    it('an aborted signal makes every method reject (Transient) and create make nothing', async () => {
      const id = await create(request());
      const before = await count();
      const req = request();
      const results = await Promise.allSettled([
        provider.create(req, aborted()),
        provider.get(id, aborted()),
        provider.delete(id, aborted()),
        provider.listByTag(aborted()),
      ]);
      const ops: ProviderOperation[] = ['create', 'get', 'delete', 'list'];
      results.forEach((r, i) => {
        expect(r.status).toBe('rejected');
        const reason = (r as PromiseRejectedResult).reason as unknown;
        errors.push(reason);
        expectProviderError(reason, 'Transient', ops[i]!, provider.name);
      });
      expect(await count()).toBe(before);
      // the aborted delete left the instance alone
      await provider.get(id, live());
      if (provider.check !== undefined) {
        const targets = await provider.check(aborted());
        expect(targets.length).toBeGreaterThan(0);
        for (const t of targets) expect(t.ready).toBe(false);
      }
    });

    const stall = subject_hook('stall');
    stall(
      'a call stuck in the backend rejects once the signal is aborted (Transient, "aborted")',
      async (hooks) => {
        const id = await create(request());
        const release = await hooks.stall!(id);
        try {
          const controller = new AbortController();
          const pending = rejectionOf(provider.get(id, controller.signal));
          // The abort comes while the call is stalled (a trigger, not a wait: the assertion is on the outcome).
          await new Promise((r) => setTimeout(r, 50));
          controller.abort();
          const err = await pending;
          errors.push(err);
          expectProviderError(err, 'Transient', 'get', provider.name);
          expect((err as Error).message).toMatch(/aborted/);
        } finally {
          await release();
        }
      },
    );

    const deleting = subject_hook('startDeleteInProgress');
    deleting('get during an in-progress delete still returns the instance', async (hooks) => {
      const id = await create(request());
      await hooks.startDeleteInProgress!(id);
      const got = await provider.get(id, live());
      expect(got.id).toBe(id);
    });

    it('check (when implemented) returns one entry per target, in a stable order, and never throws', async (ctx) => {
      if (provider.check === undefined) {
        ctx.skip('provider has no check');
        return;
      }
      const a = await provider.check(live());
      const b = await provider.check(live());
      expect(a.length).toBeGreaterThan(0);
      expect(a.map((t) => t.name)).toEqual(b.map((t) => t.name));
      expect(new Set(a.map((t) => t.name)).size).toBe(a.length);
    });

    // Last: it inspects everything the suite provoked.
    it('no cloud-init text in any error message or log line', () => {
      const lines = subject.logLines();
      expect(lines.length).toBeGreaterThan(0);
      for (const line of lines) expect(line).not.toContain(sentinel);
      expect(errors.length).toBeGreaterThan(0);
      for (const err of errors) {
        const e = err as Error;
        for (const text of [
          String(err),
          e.message,
          e.stack ?? '',
          JSON.stringify(err),
          JSON.stringify(e.cause ?? null),
        ]) {
          expect(text).not.toContain(sentinel);
        }
      }
    });

    /** `it` when every named hook exists, else `it.skip` with the missing hook in the title. */
    function subject_hook(...needed: (keyof ConformanceHooks)[]) {
      return (title: string, body: (hooks: ConformanceHooks) => Promise<void>) => {
        // The factory runs in beforeAll, after collection: decide at run time,
        // and report a missing hook as a skip (never as a pass).
        it(title, async (ctx) => {
          const missing = needed.filter((h) => subject.hooks[h] === undefined);
          if (missing.length > 0) {
            ctx.skip(`needs hook ${missing.join(', ')}`);
            return;
          }
          await body(subject.hooks);
        });
      };
    }
  });
}
