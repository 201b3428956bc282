import { defineSearchAttributeKey, SearchAttributeType } from '@temporalio/common';

export const ProxyNamespaceKey = defineSearchAttributeKey('ProxyNamespace', SearchAttributeType.KEYWORD);
export const ProxyNameKey = defineSearchAttributeKey('ProxyName', SearchAttributeType.KEYWORD);
export const ProxyProviderKey = defineSearchAttributeKey('ProxyProvider', SearchAttributeType.KEYWORD);
export const ProxyPhaseKey = defineSearchAttributeKey('ProxyPhase', SearchAttributeType.KEYWORD);
export const ProxyModeKey = defineSearchAttributeKey('ProxyMode', SearchAttributeType.KEYWORD);
