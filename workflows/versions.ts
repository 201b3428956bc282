/**
 * Every patch id the workflows record, in one table: what each gates, the
 * recorded histories that replay its old path, and when it may move on.
 * Every `patched()` and `deprecatePatch()` in workflows/ takes its id from
 * here. An id is written into histories as a marker: never change one.
 *
 * A patch retires in three steps, a release apart (docs/architecture.md,
 * Versioning): `patched(id)` keeps both paths while a run may still be on
 * the old one; `deprecatePatch(id)` once none can be (the old branch goes,
 * its `@<id>` histories are deleted: they can no longer replay); then the
 * call goes once no open run has a history from before the deprecation.
 *
 * KEPT_HISTORIES below lists the other `<name>@<suffix>` histories: those
 * of changes that needed no patch.
 */
export interface PatchRecord {
  /** The marker's id as histories record it. */
  readonly id: string;
  readonly workflow: 'proxyWorkflow' | 'proxyPoolWorkflow';
  readonly stage: 'patched' | 'deprecated';
  /** The commit (and issue) that brought it. */
  readonly since: string;
  /** What the new path does differently, and where the call is. */
  readonly gates: string;
  /** Histories under tests/fixtures/histories that replay the old (pre-patch) path. */
  readonly oldPathHistories: readonly string[];
  /** When the call may become `deprecatePatch()`. */
  readonly deprecateWhen: string;
}

export const PATCHES = {
  deletionShowsError: {
    id: 'deletion-shows-error',
    workflow: 'proxyWorkflow',
    stage: 'patched',
    since: '3200ac0 (issue 26)',
    gates:
      'A deletion held up by a provider error shows it (Provisioned DeletionBlocked, status.message) instead ' +
      'of "Deleting": an error latched before the deletion is dropped as it begins, one latched during it ' +
      'is cleared when a delete call succeeds again. Status content only, but another status is other ' +
      'status writes (local activities). Called once, as runDeletion (proxy/deletion.ts) begins; the ' +
      "answer is carried across continue-as-new in the state's deletionShowsError.",
    oldPathHistories: [
      'proxy-cloud-init-latch-retried@before-quick-create.binpb',
      'proxy-cloud-init-secret-gone-kept@before-quick-create.binpb',
      'proxy-create-ready-replace-delete@before-first-look.binpb',
      'proxy-delete-finds-instance-by-uid@before-quick-create.binpb',
      'proxy-deleted-unwatched@before-quick-create.binpb',
      'proxy-drain-replace-delete@before-quick-create.binpb',
      'proxy-health-wakeups-drift-replace-delete@before-quick-create.binpb',
      'proxy-resume-from-recorded-status@before-quick-create.binpb',
      'proxy-status-written-only-on-change@before-quick-create.binpb',
    ],
    deprecateWhen:
      'once no open Proxy run began its deletion on a worker from before 3200ac0: only a run already ' +
      'deleting when its worker was upgraded is on the old path (a run that continues as new asks again ' +
      'and takes the new one). Then the @before-quick-create and @before-first-look histories above ' +
      'replay the new path only where it makes the same commands: delete those that stop replaying.',
  },
  poolRemoveBeforeCreate: {
    id: 'pool-remove-before-create',
    workflow: 'proxyPoolWorkflow',
    stage: 'patched',
    since: '99af1de (issue 31)',
    gates:
      'A pool step removes members before it creates new ones, so a step that does both never shows ' +
      'replicas + maxSurge + 1 live members; the old path creates first. Called at every step that acts ' +
      '(pool/workflow.ts).',
    // Recorded before the patch (bbf59b8), restored from there when this
    // table was made: the re-recording in 0f6bdf1 had not kept the old bytes.
    oldPathHistories: ['pool-scale-heal-delete@pool-remove-before-create.binpb'],
    deprecateWhen:
      'once every ProxyPool run open on a worker from before 99af1de has ended or continued as new (a ' +
      'pool run continues as new within 4,000 history events; the new run takes the new path at its ' +
      'first step).',
  },
} as const satisfies Record<string, PatchRecord>;

/**
 * Histories kept as recorded before a change that needed no patch: the
 * history itself carries what picks the path (an activity result or a
 * start input without the new field), and the code still takes that path
 * for such data. They guard that runs started before the change keep
 * replaying.
 */
export interface KeptHistoryRecord {
  /** The suffix of the histories' names: `<name>@<suffix>.binpb`. */
  readonly suffix: string;
  readonly since: string;
  /** What those runs did, and what in their history picks it. */
  readonly oldPath: string;
  /** When the histories may be deleted. */
  readonly deleteWhen: string;
}

export const KEPT_HISTORIES = [
  {
    suffix: 'before-first-look',
    since: 'ad1a054',
    oldPath:
      "A create's result carries no first look (`seen`): the run Gets the new instance itself " +
      '(transitions.ts applyCreated schedules no look).',
    deleteWhen: 'once no open Proxy run has a create from before ad1a054 in its history',
  },
  {
    suffix: 'before-quick-create',
    since: 'b55f01e',
    oldPath:
      "The worker's timing carries no `quickCreate` and the start no recorded status: the create is an " +
      'activity with a status write before it (loop.ts), and the start reads the status (start.ts).',
    deleteWhen: 'once no open Proxy run started before b55f01e',
  },
  {
    suffix: 'before-create-at-start',
    since: '0f6bdf1',
    oldPath:
      "The first local activity's result carries no `created`: the run makes its create in the loop " +
      '(start.ts, loop.ts).',
    deleteWhen: 'once no open Proxy run started before 0f6bdf1',
  },
  {
    suffix: 'before-status-at-start',
    since: 'e578b38, 29511e8',
    oldPath:
      "The create at the start comes without a `reported` status: the run's first publish writes it " +
      '(start.ts).',
    deleteWhen: 'once no open Proxy run started before 29511e8',
  },
] as const satisfies readonly KeptHistoryRecord[];
