/**
 * vbmem/errors: the errors of the JavaScript client of vbmemd (re-exported by index.js).
 * @module vbmem/errors
 */

// ------------------------------------------------------------------------------------ errors

/**
 * An error answered by vbmemd (an RFC 9457 problem+json document), or a failure to reach it.
 * `status` is the HTTP status (null when the server was not reached), `field` the JSON path or
 * header at fault when one is, `requestId` the server's request id, `problem` the whole document.
 */
export class VbmemError extends Error {
  /**
   * @param {object} [p]
   * @param {number|null} [p.status] HTTP status (null: not reached)
   * @param {string} [p.title]
   * @param {string} [p.detail]
   * @param {string|null} [p.field]
   * @param {string|null} [p.requestId]
   * @param {string|null} [p.type]
   * @param {object} [p.problem]
   */
  constructor({ status = null, title = "", detail = "", field = null, requestId = null, type = null,
                problem = null } = {}) {
    let msg = status ? `${status} ${title}: ${detail}` : (detail || title);
    if (field) msg += ` (field ${field})`;
    super(msg);
    this.name = "VbmemError";
    /** @type {number|null} */ this.status = status;
    /** @type {string} */ this.title = title;
    /** @type {string} */ this.detail = detail;
    /** @type {string|null} */ this.field = field;
    /** @type {string|null} */ this.requestId = requestId;
    /** @type {string|null} */ this.type = type;
    /** @type {object} */ this.problem = problem || {};
  }
}

/** The server could not be reached, or did not answer within the timeout (status null). */
export class ConnectionFailed extends VbmemError {
  /** @param {object} [p] as VbmemError's */
  constructor(p = {}) {
    super(p);
    this.name = "ConnectionFailed";
  }
}
