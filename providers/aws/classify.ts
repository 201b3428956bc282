/**
 * Classification of everything an EC2 call can throw (contract §5), in one
 * place, from EC2's documented error codes (issue 59, item 4; the codes,
 * statuses and real messages are collected in docs/providers/aws.md).
 *
 * What reaches here: `@aws-sdk/client-ec2`'s service errors (`name` is the
 * body's `Errors/Error/Code`, `$metadata.httpStatusCode` the HTTP status,
 * `message` EC2's text, which we read for a field name or an encoded
 * authorization message and never keep), the SDK's credential-chain errors
 * (`CredentialsProviderError`: no answer from EC2 at all), network errors
 * (`code` ECONNREFUSED...), a timeout or abort, and anything a bug throws.
 *
 * | EC2 code (HTTP)                                             | Class |
 * |-------------------------------------------------------------|-------|
 * | RequestLimitExceeded (503), Throttling, EC2ThrottledException | Transient (rate limited; retried with backoff) |
 * | Unavailable (503), InternalError (500), any other 5xx        | Transient |
 * | InsufficientInstanceCapacity (500), InsufficientFreeAddressesInSubnet (400), InsufficientCapacityOnHost, Unsupported | capacity: create tries the next instance type / subnet, then Transient |
 * | InstanceLimitExceeded, VcpuLimitExceeded, MaxSpotInstanceCountExceeded, AddressLimitExceeded (400) | QuotaExceeded |
 * | UnauthorizedOperation (403)                                  | Permanent, naming the action; the encoded authorization message kept encoded |
 * | AuthFailure (401), InvalidClientTokenId, SignatureDoesNotMatch, OptInRequired | Permanent: the credentials or the account |
 * | InvalidAMIID.NotFound / .Malformed / .Unavailable (400)      | Permanent: check placement.image / aws.imageId |
| SsmInvalidParameter (400)                                    | Permanent: the image's SSM parameter did not resolve |
 * | InvalidParameterValue (400)                                  | Permanent, naming the parameter EC2 names |
 * | InvalidSubnetID.NotFound / .Malformed (400)                  | Permanent: check aws.subnetIds |
 * | InvalidGroup.NotFound, InvalidGroupId.Malformed (400)        | Permanent: check aws.securityGroupIds |
 * | InvalidInstanceID.NotFound (400)                             | NotFound (get and delete decide whether it means gone) |
 * | InvalidInstanceID.Malformed (400)                            | Permanent |
 * | RequestExpired (400), ExpiredToken, ExpiredTokenException     | Transient: credentials expired, retried until refreshed |
 * | CredentialsProviderError (no credentials found by the chain) | Transient: ProviderHealth and the Proxy say so; retried until they exist |
 * | any other 4xx                                                | Permanent |
 * | no HTTP status (network, timeout)                            | Transient |
 *
 * The raw code and status are logged at debug by the provider, because the
 * class collapses them; the code also survives in the ProviderError's cause.
 */
import { httpCheckReason, isAbortError, systemErrorCode } from '../shared/http-failure.js';
import type { ErrorClass } from '../types.js';

export const THROTTLING_CODES = [
  'RequestLimitExceeded',
  'Throttling',
  'ThrottlingException',
  'EC2ThrottledException',
];
export const UNAVAILABLE_CODES = ['Unavailable', 'ServiceUnavailable', 'InternalError', 'InternalFailure'];
/** No room for this instance type in this zone or subnet now: the next candidate may have it. */
export const CAPACITY_CODES = [
  'InsufficientInstanceCapacity',
  'InsufficientFreeAddressesInSubnet',
  'InsufficientCapacityOnHost',
  'Unsupported',
];
export const QUOTA_CODES = [
  'InstanceLimitExceeded',
  'VcpuLimitExceeded',
  'MaxSpotInstanceCountExceeded',
  'AddressLimitExceeded',
];
export const CREDENTIAL_REFUSED_CODES = [
  'AuthFailure',
  'InvalidClientTokenId',
  'SignatureDoesNotMatch',
  'OptInRequired',
];
export const CREDENTIAL_EXPIRED_CODES = ['RequestExpired', 'ExpiredToken', 'ExpiredTokenException'];
/** A missing resource an entry or a Proxy names: the setting a user checks for it. */
export const FIELD_OF_CODE: Record<string, string> = {
  'InvalidAMIID.NotFound': 'placement.image or aws.imageId',
  'InvalidAMIID.Malformed': 'placement.image or aws.imageId',
  'InvalidAMIID.Unavailable': 'placement.image or aws.imageId',
  // An SSM parameter (resolve:ssm:...) EC2 could not resolve to an AMI.
  SsmInvalidParameter: 'placement.image or aws.imageId (the SSM parameter)',
  'InvalidSubnetID.NotFound': 'aws.subnetIds',
  'InvalidSubnetID.Malformed': 'aws.subnetIds',
  InvalidSubnet: 'aws.subnetIds',
  'InvalidGroup.NotFound': 'aws.securityGroupIds',
  'InvalidGroupId.Malformed': 'aws.securityGroupIds',
  InvalidInstanceType: 'placement.machineType or aws.instanceTypes',
  'InvalidInstanceType.NotFound': 'placement.machineType or aws.instanceTypes',
  InvalidAvailabilityZone: 'placement.zone',
};
/** The parameter InvalidParameterValue names ("Invalid value 'x' for InstanceType."), as the setting behind it. */
const FIELD_OF_PARAMETER: Record<string, string> = {
  InstanceType: 'placement.machineType or aws.instanceTypes',
  ImageId: 'placement.image or aws.imageId',
  SubnetId: 'aws.subnetIds',
  UserData: 'cloudInit (EC2 user data: at most 16 KB before base64)',
  AvailabilityZone: 'placement.zone',
  'Placement.AvailabilityZone': 'placement.zone',
  SecurityGroupId: 'aws.securityGroupIds',
  SecurityGroupIds: 'aws.securityGroupIds',
  TagSpecifications: 'aws.tags (or the installation name)',
};

const CODE = /^[A-Za-z][A-Za-z0-9_.-]{0,63}$/;

/** EC2's error code (`Errors/Error/Code`), when the error is an answer from EC2 and its name is an identifier. */
export function ec2ErrorCode(err: unknown): string | undefined {
  if (typeof err !== 'object' || err === null) return undefined;
  const e = err as { name?: unknown; Code?: unknown; $metadata?: unknown };
  if (e.$metadata === undefined) return undefined;
  for (const v of [e.Code, e.name]) if (typeof v === 'string' && CODE.test(v)) return v;
  return undefined;
}

/** The HTTP status of an answer from EC2, or undefined (no answer: network, timeout, credentials). */
export function httpStatus(err: unknown): number | undefined {
  const s = (err as { $metadata?: { httpStatusCode?: unknown } } | null)?.$metadata?.httpStatusCode;
  return typeof s === 'number' && Number.isInteger(s) && s >= 100 && s <= 599 ? s : undefined;
}

function messageOf(err: unknown): string {
  const m = (err as { message?: unknown } | null)?.message;
  return typeof m === 'string' ? m.slice(0, 20_000) : '';
}

/**
 * The encoded authorization failure message of an UnauthorizedOperation:
 * an opaque token only `sts:DecodeAuthorizationMessage` can read, made of
 * URL-safe characters, so it may be shown as it is (and must be: it is the
 * only way to learn which policy denied the call).
 */
export function encodedAuthorizationMessage(err: unknown): string | undefined {
  return /Encoded authorization failure message: ([A-Za-z0-9_-]{1,10000})/.exec(messageOf(err))?.[1];
}

/** The parameter an InvalidParameterValue names, as an identifier (never the value). */
export function invalidParameter(err: unknown): string | undefined {
  const text = messageOf(err);
  const m =
    /for ([A-Za-z][A-Za-z0-9.]{0,63}?)\.?(?:\s|$)/.exec(text) ??
    /^Invalid ([A-Z][A-Za-z ]{0,40}) \(/.exec(text);
  if (m === null) return undefined;
  return m[1]!.replace(/ /g, '');
}

export interface Classification {
  errorClass: ErrorClass;
  /** For the error message: composed from the code, the status and our own hints only. */
  summary: string;
  code?: string;
  status?: number;
  /** No capacity for this candidate (instance type, subnet): create tries the next one. */
  capacity: boolean;
}

/** The class of an EC2 failure, by the table above. `action` is the EC2 API action called, for the message. */
export function classify(err: unknown, action = 'EC2'): Classification {
  const status = httpStatus(err);
  const code = ec2ErrorCode(err);
  const name = (err as { name?: unknown } | null)?.name;
  if (status === undefined) {
    if (name === 'CredentialsProviderError')
      return {
        errorClass: 'Transient',
        capacity: false,
        summary:
          'no AWS credentials: the SDK default chain found none in the environment (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), the shared config and credentials files (~/.aws, the profile of aws.profile or AWS_PROFILE), web identity (AWS_WEB_IDENTITY_TOKEN_FILE with AWS_ROLE_ARN), container credentials (AWS_CONTAINER_CREDENTIALS_FULL_URI or _RELATIVE_URI, EKS Pod Identity) or instance metadata (the instance role; not asked when AWS_EC2_METADATA_DISABLED=true); retried until they exist',
      };
    if (isAbortError(err))
      return { errorClass: 'Transient', capacity: false, summary: `${action} request aborted or timed out` };
    const sys = systemErrorCode(err);
    return {
      errorClass: 'Transient',
      capacity: false,
      summary: sys === undefined ? `${action} failed before an answer (network)` : `EC2 unreachable (${sys})`,
    };
  }
  const answered = `${action}: EC2 answered ${status}${code === undefined ? '' : ` ${code}`}`;
  const out = (errorClass: ErrorClass, hint = '', capacity = false): Classification => ({
    errorClass,
    summary: `${answered}${hint}`,
    status,
    capacity,
    ...(code === undefined ? {} : { code }),
  });
  if (code !== undefined) {
    if (THROTTLING_CODES.includes(code)) return out('Transient', ' (rate limited; retried with backoff)');
    if (UNAVAILABLE_CODES.includes(code)) return out('Transient');
    if (CAPACITY_CODES.includes(code))
      return out('Transient', ' (no capacity for this instance type here now)', true);
    if (QUOTA_CODES.includes(code))
      return out('QuotaExceeded', ' (an account limit; raise it with Service Quotas)');
    if (code === 'UnauthorizedOperation') {
      const encoded = encodedAuthorizationMessage(err);
      return out(
        'Permanent',
        `: the credentials may not call ${action}${
          encoded === undefined
            ? ''
            : `; decode why with "aws sts decode-authorization-message --encoded-message <message>": ${encoded}`
        }`,
      );
    }
    if (CREDENTIAL_REFUSED_CODES.includes(code))
      return out(
        'Permanent',
        ': the credentials were refused; check the access key, its secret and the account',
      );
    if (CREDENTIAL_EXPIRED_CODES.includes(code))
      return out('Transient', ' (credentials expired or the clock is off; retried until they are refreshed)');
    if (code === 'InvalidInstanceID.NotFound') return out('NotFound');
    if (code === 'InvalidInstanceID.Malformed') return out('Permanent', ': not an instance id');
    const field = FIELD_OF_CODE[code];
    if (field !== undefined) return out('Permanent', `; check ${field}`);
    if (
      code === 'InvalidParameterValue' ||
      code === 'InvalidParameter' ||
      code === 'InvalidParameterCombination'
    ) {
      const param = invalidParameter(err);
      const check =
        param === undefined ? undefined : (FIELD_OF_PARAMETER[param] ?? `the request parameter ${param}`);
      return out('Permanent', check === undefined ? '' : `; check ${check}`);
    }
  }
  if (status >= 500 || status === 429 || status === 408) return out('Transient');
  if (status >= 400) return out('Permanent');
  return out('Transient');
}

/** check()'s reason for a failed probe (the shared set, contract §8). */
export function checkReason(err: unknown, aborted: boolean): string {
  const status = httpStatus(err);
  const code = ec2ErrorCode(err);
  if (status === undefined && (err as { name?: unknown } | null)?.name === 'CredentialsProviderError')
    return 'Unauthorized';
  if (code !== undefined && [...CREDENTIAL_REFUSED_CODES, ...CREDENTIAL_EXPIRED_CODES].includes(code))
    return 'Unauthorized';
  if (code === 'UnauthorizedOperation') return 'Forbidden';
  return httpCheckReason(err, status, aborted);
}
