// The element menu: numbers the visible interactive elements of the page so the model can
// name them by index, and marks each with a data-manus-index attribute so the owner can
// find it again. An element keeps its number for as long as it stays on the page; new
// elements get numbers from `next` on, so a number is never reused within a session and a
// stale one fails instead of hitting another element.
// Called through WebDriver with arguments [next, limit]; returns the menu and scroll state.
const [next0, limit] = arguments;
const ATTR = 'data-manus-index';
const INTERACTIVE = [
  'a[href]', 'button', 'input:not([type=hidden])', 'select', 'textarea', 'summary',
  '[role=button]', '[role=link]', '[role=checkbox]', '[role=radio]', '[role=tab]',
  '[role=menuitem]', '[role=option]', '[role=switch]', '[role=combobox]', '[role=textbox]',
  '[role=searchbox]', '[contenteditable=""]', '[contenteditable=true]', '[onclick]',
].join(',');
let next = next0;

const shown = (el) => {
  const r = el.getBoundingClientRect();
  if (r.width <= 0 || r.height <= 0) return false;
  if (el.checkVisibility) {
    return el.checkVisibility({ opacityProperty: true, visibilityProperty: true });
  }
  const s = getComputedStyle(el);
  return s.visibility !== 'hidden' && s.display !== 'none' && parseFloat(s.opacity) > 0;
};
const squash = (t, n) => {
  const s = (t || '').replace(/\s+/g, ' ').trim();
  return s.length > n ? s.slice(0, n - 1) + '…' : s;
};
const quoted = (name, v, n) => (v ? ` ${name}="${squash(v, n).replace(/"/g, "'")}"` : '');

// `<input type=email name=email placeholder="you@example.com"> text`
const describe = (el) => {
  const tag = el.tagName.toLowerCase();
  let attrs = '';
  let text = '';
  if (tag === 'input') {
    const type = (el.getAttribute('type') || 'text').toLowerCase();
    attrs += ` type=${type}` + quoted('name', el.name, 30) + quoted('placeholder', el.placeholder, 40);
    if (type === 'checkbox' || type === 'radio') attrs += el.checked ? ' checked' : '';
    else if (type !== 'password' && el.value) attrs += quoted('value', el.value, 40);
    text = el.labels && el.labels.length ? squash(el.labels[0].innerText, 60) : '';
  } else if (tag === 'textarea') {
    attrs += quoted('name', el.name, 30) + quoted('placeholder', el.placeholder, 40);
    text = squash(el.value, 60);
  } else if (tag === 'select') {
    const chosen = el.selectedOptions && el.selectedOptions[0];
    attrs += quoted('name', el.name, 30);
    text = `${chosen ? squash(chosen.text, 40) : '(none)'} (${el.options.length} options)`;
  } else {
    if (tag === 'a') attrs += quoted('href', el.getAttribute('href'), 60);
    const img = el.querySelector && el.querySelector('img[alt]');
    text = squash(el.innerText, 80) || (img ? squash(img.alt, 60) : '') || squash(el.value, 60);
  }
  const role = el.getAttribute('role');
  if (role) attrs += ` role=${role}`;
  const label = el.getAttribute('aria-label') || el.getAttribute('title');
  if (!text && label) text = squash(label, 80);
  if (el.disabled) attrs += ' disabled';
  return `<${tag}${attrs}>${text ? ' ' + text : ''}`;
};

const lines = [];
const listed = new Set();
let omitted = 0;
for (const el of document.querySelectorAll(INTERACTIVE)) {
  // A control inside a link or button is reached through it.
  const outer = el.parentElement && el.parentElement.closest('a[href],button');
  if (outer || !shown(el)) continue;
  if (lines.length >= limit) {
    omitted++;
    continue;
  }
  let idx = el.getAttribute(ATTR);
  if (!idx || listed.has(idx)) {
    idx = String(next++);
    el.setAttribute(ATTR, idx);
  }
  listed.add(idx);
  lines.push(`[${idx}] ${describe(el)}`);
}
// An element that left the menu loses its number, so a stale index cannot reach it.
for (const el of document.querySelectorAll(`[${ATTR}]`)) {
  if (!listed.has(el.getAttribute(ATTR))) el.removeAttribute(ATTR);
}
const doc = document.documentElement;
const height = Math.max(doc.scrollHeight, document.body ? document.body.scrollHeight : 0);
return {
  lines,
  omitted,
  next,
  above: Math.round(window.scrollY),
  below: Math.max(0, Math.round(height - window.scrollY - window.innerHeight)),
};
