/**
 * The `vendor` provider's presets: what each vendor documents about writing
 * a session into the credentials, its super-proxy endpoint, session ids,
 * session lifetimes and the characters its usernames and passwords may
 * hold. Sources: ../shared/notes/aws-and-vendors.md section B (the URLs are
 * in each preset's `sources`). Where the vendor documents nothing the rule
 * here is a conservative choice, marked UNCONFIRMED.
 *
 * `{user}` is the account's username as the vendor's dashboard names the
 * part that goes into the template: Bright Data's customer id (`hl_…`),
 * Oxylabs' and Decodo's user, SOAX's package id, IPRoyal's whole username.
 * A Secret holding Bright Data's whole `brd-customer-…-zone-…` string goes
 * with a custom template instead: `{user}-session-{session}[-country-{country}]`.
 */
import type { CharRule, SessionRules, VendorCharRules, VendorTemplates } from './template.js';

export interface VendorPreset {
  name: PresetName;
  /** The vendor's name as people write it. */
  title: string;
  usernameTemplate: string;
  passwordTemplate: string;
  /** The default super-proxy endpoint (HTTP proxy). */
  endpoint: { host: string; port: number };
  session: SessionRules;
  /** Session lifetime bounds and default, in seconds. */
  lifetime: { minSeconds: number; maxSeconds: number; defaultSeconds: number };
  /**
   * A session the vendor releases after this long without traffic, when it
   * documents one: whoever keeps the session (the prober) must use it more
   * often than this.
   */
  idleTimeoutSeconds?: number;
  chars: VendorCharRules;
  /** Where the rules come from. */
  sources: string[];
}

export const PRESET_NAMES = ['brightdata', 'oxylabs', 'decodo', 'iproyal', 'soax'] as const;
export type PresetName = (typeof PRESET_NAMES)[number];

const LOWER_DIGITS = 'abcdefghijklmnopqrstuvwxyz0123456789';
const UPPER_DIGITS = 'ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789';

/** Letters, digits, `_` and `-`: a dash-separated username of word values. */
const DASHED_USERNAME: CharRule = { pattern: /[A-Za-z0-9_-]/, describe: 'letters, digits, "_" and "-"' };
/** Letters, digits and `_`: one value between `-` separators. */
const WORD_VALUE: CharRule = { pattern: /[A-Za-z0-9_]/, describe: 'letters, digits and "_"' };
/** Visible ASCII: what a password holds when the vendor documents nothing narrower (UNCONFIRMED). */
const VISIBLE_ASCII: CharRule = { pattern: /[\x21-\x7e]/, describe: 'visible ASCII (no spaces)' };
/** Visible ASCII but `:` (RFC 7617: a Basic username cannot hold one). */
const VISIBLE_NO_COLON: CharRule = { pattern: /[\x21-\x39\x3b-\x7e]/, describe: 'visible ASCII except ":"' };

export const PRESETS: Readonly<Record<PresetName, VendorPreset>> = {
  brightdata: {
    name: 'brightdata',
    title: 'Bright Data',
    // [BD1] brd-customer-<id>-zone-<zone>[-key-value…]; the parser splits on "-" alternating key/value [BD5].
    usernameTemplate: 'brd-customer-{user}-zone-{zone}-session-{session}[-country-{country}]',
    passwordTemplate: '{password}',
    // [BD4] HTTP/S super-proxy with the new CA (22225 is the legacy port).
    endpoint: { host: 'brd.superproxy.io', port: 33335 },
    // "any random string/counter" [BD2]; no "-" (the parser's separator) [BD5]; no "_" either, so
    // no id can start "glob_" (a global session, which ignores the client's source IP) [BD2].
    // Length limit UNCONFIRMED: 12 generated, 1 to 32 accepted (conservative).
    session: { alphabet: LOWER_DIGITS, length: 12, minLength: 1, maxLength: 32 },
    // No lifetime in the username: a session is sticky while used and released after
    // 1 min idle [BD2]. No maximum is documented: 1 day here is our own bound (UNCONFIRMED).
    lifetime: { minSeconds: 60, maxSeconds: 86_400, defaultSeconds: 600 },
    idleTimeoutSeconds: 60,
    chars: { username: DASHED_USERNAME, password: VISIBLE_ASCII, value: WORD_VALUE },
    sources: [
      'https://docs.brightdata.com/proxy-networks/config-options',
      'https://docs.brightdata.com/proxy-networks/faqs',
      'https://docs.brightdata.com/cn/proxy-networks/errorCatalog',
      'https://www.skills.sh/brightdata/skills/brightdata-proxy',
      'https://github.com/luminati-io/luminati-proxy/blob/master/lib/username.js',
    ],
  },
  oxylabs: {
    name: 'oxylabs',
    title: 'Oxylabs (residential)',
    // [OX1][OX2] customer-USER[-cc-CC][-sessid-ID][-sesstime-MIN]; cc is case-insensitive [OX1][OX4].
    usernameTemplate: 'customer-{user}[-cc-{country}]-sessid-{session}-sesstime-{minutes}',
    passwordTemplate: '{password}',
    endpoint: { host: 'pr.oxylabs.io', port: 7777 },
    // "0-9, and A-Z" [OX2][OX4]: digits and capitals only (whether lowercase is accepted too is
    // UNCONFIRMED, so none is generated). Length UNCONFIRMED: 10 generated, 1 to 32 accepted.
    session: { alphabet: UPPER_DIGITS, length: 10, minLength: 1, maxLength: 32 },
    // Default 10 min; sesstime at most 1440 min [OX2]; in whole minutes.
    lifetime: { minSeconds: 60, maxSeconds: 86_400, defaultSeconds: 600 },
    // "10 min or 60 s idle" [OX2].
    idleTimeoutSeconds: 60,
    chars: { username: DASHED_USERNAME, password: VISIBLE_ASCII, value: WORD_VALUE },
    sources: [
      'https://developers.oxylabs.io/proxies/residential-proxies/select-country',
      'https://developers.oxylabs.io/proxies/residential-proxies/session-control',
      'https://developers.oxylabs.io/proxies/residential-proxies/additional-information',
      'https://github.com/PipedreamHQ/pipedream/blob/master/components/oxylabs/actions/create-proxy-session/create-proxy-session.mjs',
      'https://developers.oxylabs.io/help-center/troubleshooting/response-codes-for-proxies',
    ],
  },
  decodo: {
    name: 'decodo',
    title: 'Decodo (Smartproxy)',
    // Parameter names [DC1]; the whole string only in community code [DC4].
    usernameTemplate: 'user-{user}[-country-{country}]-session-{session}-sessionduration-{minutes}',
    passwordTemplate: '{password}',
    // [DC2]; the country hosts and port ranges of [DC4] are UNCONFIRMED.
    endpoint: { host: 'gate.decodo.com', port: 7000 },
    // [A-Za-z0-9_] per community code [DC4]; official limits UNCONFIRMED: lowercase and digits,
    // 12 generated, 1 to 32 accepted.
    session: { alphabet: LOWER_DIGITS, length: 12, minLength: 1, maxLength: 32 },
    // Default 10 min; sessionduration 1-1440 min [DC1].
    lifetime: { minSeconds: 60, maxSeconds: 86_400, defaultSeconds: 600 },
    chars: {
      // A base username: letters, digits and "_" (6-64) [DC3]; options add "-".
      username: DASHED_USERNAME,
      // Passwords may not contain "@" or ":" [DC3].
      password: { pattern: /[\x21-\x39\x3b-\x3f\x41-\x7e]/, describe: 'visible ASCII except "@" and ":"' },
      value: WORD_VALUE,
    },
    sources: [
      'https://help.decodo.com/docs/residential-proxy-custom-sticky-sessions',
      'https://help.decodo.com/docs/mobile-proxy-quick-start',
      'https://help.decodo.com/api-reference/sub-users/create-sub-user',
      'https://github.com/rainfrog123/blue/blob/main/web/proxy/decodo/decodo/config.py',
    ],
  },
  iproyal: {
    name: 'iproyal',
    title: 'IPRoyal (residential)',
    // Options go in the password, "_"-separated [IR1][IR2][IR3].
    usernameTemplate: '{user}',
    passwordTemplate: '{password}[_country-{country}]_session-{session}_lifetime-{duration}',
    endpoint: { host: 'geo.iproyal.com', port: 12321 },
    // Exactly 8 alphanumeric characters [IR1]; lowercase and digits generated (letter case UNCONFIRMED).
    session: { alphabet: LOWER_DIGITS, length: 8, minLength: 8, maxLength: 8 },
    // _lifetime- from 1 s to 7 d, one unit only [IR1]; the unit letters s/m/h/d are UNCONFIRMED.
    // The default (no lifetime given) is not documented: 10 min here.
    lifetime: { minSeconds: 1, maxSeconds: 7 * 86_400, defaultSeconds: 600 },
    chars: {
      username: VISIBLE_NO_COLON,
      // UNCONFIRMED: the options are "_"-separated words, and the account password comes first;
      // letters, digits, "_" and "-" only, so nothing in it is read as another option's separator
      // by a vendor (our own parser takes the account and is not confused either way).
      password: DASHED_USERNAME,
      value: { pattern: /[A-Za-z0-9]/, describe: 'letters and digits' },
    },
    sources: [
      'https://docs.iproyal.com/proxies/residential/proxy/rotation',
      'https://docs.iproyal.com/proxies/residential/proxy/location',
      'https://docs.iproyal.com/tools/web-unblocker/geo-location-targeting',
      'https://docs.iproyal.com/proxies/residential/proxy/making-requests/response-codes',
    ],
  },
  soax: {
    name: 'soax',
    title: 'SOAX (ISP)',
    // package-<id>-country-<cc>-sessionid-<id>-sessionlength-<sec> [SX1]; country made optional here.
    usernameTemplate: 'package-{user}[-country-{country}]-sessionid-{session}-sessionlength-{seconds}',
    passwordTemplate: '{password}',
    endpoint: { host: 'proxy.soax.com', port: 5000 },
    // "random string" [SX1]: lowercase and digits, 12 generated, 1 to 32 accepted (UNCONFIRMED).
    session: { alphabet: LOWER_DIGITS, length: 12, minLength: 1, maxLength: 32 },
    // Default 180 s; sessionlength 0-86400 s [SX1] (0 means no sticky session: at least 1 here).
    lifetime: { minSeconds: 1, maxSeconds: 86_400, defaultSeconds: 180 },
    chars: { username: DASHED_USERNAME, password: VISIBLE_ASCII, value: WORD_VALUE },
    sources: ['https://helpcenter.soax.com/en/articles/7035059-session-control-for-isp-proxies'],
  },
};

/**
 * The rules of a custom entry (no preset): any visible ASCII (no ":" in the
 * username), session ids of lowercase letters and digits, lifetimes from
 * 1 s to 7 days.
 */
export const CUSTOM_RULES: Pick<VendorPreset, 'session' | 'lifetime' | 'chars'> = {
  session: { alphabet: LOWER_DIGITS, length: 12, minLength: 1, maxLength: 64 },
  lifetime: { minSeconds: 1, maxSeconds: 7 * 86_400, defaultSeconds: 600 },
  chars: { username: VISIBLE_NO_COLON, password: VISIBLE_ASCII, value: VISIBLE_NO_COLON },
};

/** A preset's templates and rules, as renderCredentials and parseCredentials take them. */
export function presetTemplates(preset: VendorPreset): VendorTemplates {
  return {
    username: preset.usernameTemplate,
    password: preset.passwordTemplate,
    session: preset.session,
    chars: preset.chars,
  };
}
