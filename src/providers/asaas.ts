import { randomBytes } from 'node:crypto';
import { payloadError, verificationError } from '../errors.js';
import type { Provider } from './types.js';
import { anyMatches, requireHeader, requireJsonObject, stringAt } from './util.js';

/** Asaas: the `asaas-access-token` header carries the webhook's authentication token as is. */
export const asaas: Provider = {
  name: 'asaas',
  signatureHeaders: ['asaas-access-token'],
  // 15 attempts over about 13 hours, then the queue pauses; its events are kept 14 days
  // and sent again when the queue is reactivated. Keep keys for those 14 days.
  retryHorizonHours: 336,
  // Asaas counts only HTTP 200 as delivered; anything else penalises the queue.
  successStatus: 200,
  unsignedDeliveryId: false,
  needsSecret: true,
  fields: [],

  verify(d, source) {
    const token = requireHeader(d, 'asaas-access-token');
    if (!anyMatches([Buffer.from(token, 'utf8')], source.secrets, (s) => Buffer.from(s, 'utf8'))) throw verificationError('asaas-access-token does not match');
  },

  identify(d) {
    const body = requireJsonObject(d, 'the event id');
    const id = stringAt(body, ['id']);
    if (id === undefined) throw payloadError('body has no "id"');
    return { deliveryId: id, eventType: stringAt(body, ['event']) ?? 'unknown' };
  },

  sign(_body, secret) {
    return { headers: { 'asaas-access-token': secret } };
  },

  sample(now) {
    const d = new Date(now);
    const date = d.toISOString().slice(0, 10);
    return Buffer.from(
      JSON.stringify({
        id: `evt_${randomBytes(16).toString('hex')}&${Number.parseInt(randomBytes(4).toString('hex'), 16)}`,
        event: 'PAYMENT_RECEIVED',
        dateCreated: d.toISOString().slice(0, 19).replace('T', ' '),
        payment: {
          object: 'payment',
          id: `pay_${Number.parseInt(randomBytes(5).toString('hex'), 16)}`,
          dateCreated: date,
          customer: 'cus_000005219613',
          value: 100,
          netValue: 94.51,
          billingType: 'PIX',
          status: 'RECEIVED',
          dueDate: date,
          paymentDate: date,
          description: 'Licence',
          externalReference: null,
          deleted: false,
        },
      }),
    );
  },

  eventTypeAt: () => ({ body: ['event'] }),
};
