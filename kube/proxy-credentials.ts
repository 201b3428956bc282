/**
 * Proxy credentials in Secrets, read one way by all their readers: the
 * bridge (makes a Managed Proxy's Secret and hashes its content into the
 * spec hash), the create activity (hands them to the provider), and the api
 * and gateway processes (the prober, upstream `Proxy-Authorization`, a
 * lease's `proxyURL`). Every reader but the activity reads the informer's
 * cache of labelled Secrets. Messages name the Secret and key, never a value.
 */
import {
  CoreV1Api,
  PatchStrategy,
  setHeaderOptions,
  type KubeConfig,
  type V1Secret,
} from '@kubernetes/client-node';
import {
  generateCredentials,
  generatedCredentialsRef,
  PASSWORD_KEY,
  PROVIDER_PASSWORD_KEY,
  PROVIDER_USERNAME_KEY,
  providerCredentialsRef,
  USERNAME_KEY,
  type CredentialsLookup,
  type CredentialsRead,
  type CredentialsRef,
  type ProxyCredentials,
} from '../credentials/proxy-credentials.js';
import { API_VERSION, LABEL_PROXY_CREDENTIALS } from '../resources/proxy-schema.js';
import type { ProxyRef } from '../resources/proxy-ref.js';
import {
  createLabelledSecretInformer,
  readSecretView,
  secretViewOf,
  type LabelledSecretInformerOptions,
  type SecretView,
} from './cloud-init.js';
import { httpCode } from './errors.js';
import type { ResilientInformer } from './informer.js';

export type { CredentialsRead } from '../credentials/proxy-credentials.js';

/** The credentials `ref` names in the Proxy's namespace, or why there are none. */
export function credentialsFromSecret(
  namespace: string,
  ref: CredentialsRef,
  secret: SecretView | undefined,
): CredentialsRead {
  const what = `Secret ${namespace}/${ref.secret}`;
  const labelRule = `the label ${LABEL_PROXY_CREDENTIALS}: "true"`;
  if (!secret) return { problem: `${what} not found (it must exist and carry ${labelRule})` };
  if (secret.labels[LABEL_PROXY_CREDENTIALS] !== 'true') return { problem: `${what} lacks ${labelRule}` };
  const decode = (key: string) => {
    const encoded = secret.data[key];
    return encoded === undefined ? undefined : Buffer.from(encoded, 'base64').toString('utf8');
  };
  const username = decode(ref.usernameKey);
  const password = decode(ref.passwordKey);
  if (username === undefined) return { problem: `${what} has no key "${ref.usernameKey}"` };
  if (password === undefined) return { problem: `${what} has no key "${ref.passwordKey}"` };
  // Basic authentication cannot carry a colon in the name; CR or LF would split the header.
  if (username === '' || /[:\r\n]/.test(username))
    return {
      problem: `${what}: key "${ref.usernameKey}" must be a non-empty name without ":" or line breaks`,
    };
  if (/[\r\n]/.test(password)) return { problem: `${what}: key "${ref.passwordKey}" has a line break` };
  return { credentials: { username, password } };
}

/**
 * A Managed Proxy's generated Secret: `kubernetes.io/basic-auth`, labelled,
 * owned by the Proxy (so Kubernetes' garbage collector deletes it with the
 * Proxy).
 */
export function generatedCredentialsSecret(
  ref: ProxyRef,
  credentials: ProxyCredentials = generateCredentials(),
): V1Secret {
  return {
    apiVersion: 'v1',
    kind: 'Secret',
    type: 'kubernetes.io/basic-auth',
    metadata: {
      name: generatedCredentialsRef(ref.name).secret,
      namespace: ref.namespace,
      labels: { [LABEL_PROXY_CREDENTIALS]: 'true', 'app.kubernetes.io/managed-by': 'egress-proxies' },
      ownerReferences: [
        { apiVersion: API_VERSION, kind: 'Proxy', name: ref.name, uid: ref.uid, controller: true },
      ],
    },
    stringData: { [USERNAME_KEY]: credentials.username, [PASSWORD_KEY]: credentials.password },
  };
}

/**
 * Creates the generated Secret; an existing one (another bridge's, or one
 * the cache had not seen yet) is read back instead. Returns its view.
 */
export async function createGeneratedSecret(kc: KubeConfig, ref: ProxyRef): Promise<SecretView | undefined> {
  const body = generatedCredentialsSecret(ref);
  try {
    const made = await kc.makeApiClient(CoreV1Api).createNamespacedSecret({ namespace: ref.namespace, body });
    return secretViewOf(made);
  } catch (error) {
    if (httpCode(error) !== 409) throw error;
    return readSecretView(kc, ref.namespace, body.metadata!.name!);
  }
}

/**
 * Looks up Proxies' credentials in a cache of labelled Secrets. A generated
 * Secret that is not there means no credentials (a proxy made before they
 * existed, or whose Secret is being made), not a problem. A generated
 * Secret with the provider's pair answers that pair: what the instance
 * asks for.
 */
export function cachedCredentials(informer: ResilientInformer<V1Secret>): CredentialsLookup {
  return (namespace, ref) => {
    const secret = informer.get(ref.secret, namespace);
    if (!secret && ref.generated) return undefined;
    const view = secret && secretViewOf(secret);
    const presented =
      ref.generated && view && hasProviderCredentials(view) ? providerCredentialsRef(ref) : ref;
    return credentialsFromSecret(namespace, presented, view);
  };
}

function hasProviderCredentials(view: SecretView): boolean {
  return view.data[PROVIDER_USERNAME_KEY] !== undefined && view.data[PROVIDER_PASSWORD_KEY] !== undefined;
}

/**
 * Puts the provider's credentials for the Proxy's instance into its
 * generated Secret (or takes them out: `credentials` undefined), when the
 * Secret does not already say so. One merge patch; a Secret that is gone
 * throws (the bridge makes it again, and the activity is retried).
 */
export async function writeProviderCredentials(
  kc: KubeConfig,
  ref: ProxyRef,
  current: SecretView | undefined,
  credentials: ProxyCredentials | undefined,
): Promise<'written' | 'unchanged'> {
  const encode = (v: string) => Buffer.from(v, 'utf8').toString('base64');
  const want = credentials
    ? {
        [PROVIDER_USERNAME_KEY]: encode(credentials.username),
        [PROVIDER_PASSWORD_KEY]: encode(credentials.password),
      }
    : { [PROVIDER_USERNAME_KEY]: undefined, [PROVIDER_PASSWORD_KEY]: undefined };
  if (current && Object.entries(want).every(([k, v]) => current.data[k] === v)) return 'unchanged';
  const name = generatedCredentialsRef(ref.name).secret;
  const data = Object.fromEntries(Object.entries(want).map(([k, v]) => [k, v ?? null]));
  await kc
    .makeApiClient(CoreV1Api)
    .patchNamespacedSecret(
      { namespace: ref.namespace, name, body: { data } },
      setHeaderOptions('Content-Type', PatchStrategy.MergePatch),
    );
  return 'written';
}

/** The list+watch of Secrets labelled as proxy credentials, one per scope, read as one cache. */
export function createCredentialsSecretInformer(
  options: LabelledSecretInformerOptions,
): ResilientInformer<V1Secret> {
  return createLabelledSecretInformer(LABEL_PROXY_CREDENTIALS, options);
}
