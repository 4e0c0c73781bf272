// vega-util, as far as vega-interpreter needs it: the vega bundle (loaded
// before this module) exports these helpers already.
const v = globalThis.vega || {};
export const ascending = v.ascending;
export const isString = v.isString;
export const DisallowedObjectProperties = v.DisallowedObjectProperties;
