/**
 * A Proxy's cloud-init from the Secret it references, read one way by both
 * of its readers: the bridge (from its informer's cache of labelled
 * Secrets, to hash the content into the spec hash; the informer is here
 * too) and the create activity (from the API, to hand the text to the
 * provider). The rules and the messages are here once; a message names the
 * Secret and key, never the content.
 */
import { CoreV1Api, type KubeConfig, type V1Secret } from '@kubernetes/client-node';
import type { Logger } from 'pino';
import { LABEL_CLOUD_INIT } from '../resources/proxy-schema.js';
import { httpCode } from './errors.js';
import { createResilientInformer, type ResilientInformer } from './informer.js';
import { unionInformers } from './namespaced-informer.js';

/** A Secret as cloud-init reads it: labels and base64 values, as the API returns them. */
export interface SecretView {
  labels: Record<string, string>;
  data: Record<string, string>;
}

export function secretViewOf(secret: V1Secret): SecretView {
  return { labels: secret.metadata?.labels ?? {}, data: secret.data ?? {} };
}

export type CloudInitFromSecret = { text: string } | { problem: string };

/**
 * The cloud-init text in `key` of the Secret `namespace/name` (undefined: no
 * such Secret), or the problem that prevents it. `unlabelledLooksMissing`:
 * the reader sees labelled Secrets only (the bridge's cache), so a missing
 * Secret may be an unlabelled one, and the message says both.
 */
export function cloudInitFromSecret(
  where: { namespace: string; name: string; key: string },
  secret: SecretView | undefined,
  opts: { unlabelledLooksMissing?: boolean } = {},
): CloudInitFromSecret {
  const what = `Secret ${where.namespace}/${where.name}`;
  const labelRule = `the label ${LABEL_CLOUD_INIT}: "true"`;
  if (!secret)
    return {
      problem: opts.unlabelledLooksMissing
        ? `${what} not found, or it lacks ${labelRule}`
        : `${what} not found`,
    };
  if (secret.labels[LABEL_CLOUD_INIT] !== 'true') return { problem: `${what} lacks ${labelRule}` };
  const encoded = secret.data[where.key];
  if (encoded === undefined) return { problem: `${what} has no key "${where.key}"` };
  return { text: Buffer.from(encoded, 'base64').toString('utf8') };
}

/** Reads a Secret's view from the API (undefined: no such Secret): cloud-init's and credentials' readers alike. */
export async function readSecretView(
  kc: KubeConfig,
  namespace: string,
  name: string,
): Promise<SecretView | undefined> {
  try {
    return secretViewOf(await kc.makeApiClient(CoreV1Api).readNamespacedSecret({ namespace, name }));
  } catch (error) {
    if (httpCode(error) === 404) return undefined;
    throw error;
  }
}

/** Reads the Secret from the API (a 404 is "no such Secret") and applies the same rules. */
export async function readCloudInitSecret(
  kc: KubeConfig,
  where: { namespace: string; name: string; key: string },
): Promise<CloudInitFromSecret> {
  return cloudInitFromSecret(where, await readSecretView(kc, where.namespace, where.name));
}

/** A list+watch's options for Secrets labelled `<label>=true`. */
export interface LabelledSecretInformerOptions {
  kubeConfig: KubeConfig;
  logger: Logger;
  /** One watch per scope; undefined is every namespace. */
  scopes: ReadonlyArray<string | undefined>;
  /** Called each time a watch is scheduled to restart after an error. */
  onRestart?: () => void;
}

/**
 * The list+watch of the Secrets labelled for cloud-init (the bridge's cache:
 * it hashes their content into each Proxy's spec hash), one per scope, read
 * as one cache.
 */
export function createCloudInitSecretInformer(
  options: LabelledSecretInformerOptions,
): ResilientInformer<V1Secret> {
  return createLabelledSecretInformer(LABEL_CLOUD_INIT, options);
}

/** The list+watch of the Secrets carrying `<label>=true`, one per scope, read as one cache. */
export function createLabelledSecretInformer(
  label: string,
  options: LabelledSecretInformerOptions,
): ResilientInformer<V1Secret> {
  const core = options.kubeConfig.makeApiClient(CoreV1Api);
  const labelSelector = `${label}=true`;
  return unionInformers(
    options.scopes.map((namespace) =>
      createResilientInformer<V1Secret>({
        kubeConfig: options.kubeConfig,
        path: namespace ? `/api/v1/namespaces/${namespace}/secrets` : '/api/v1/secrets',
        labelSelector,
        list: () =>
          namespace
            ? core.listNamespacedSecret({ namespace, labelSelector })
            : core.listSecretForAllNamespaces({ labelSelector }),
        logger: options.logger,
        ...(options.onRestart ? { onRestart: options.onRestart } : {}),
      }),
    ),
  );
}
