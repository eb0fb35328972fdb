// store.js — chats kept in the browser's IndexedDB (database "nebula-webui",
// object store "chats", one record per chat with its messages inside).
//
// Chats live only in this browser profile: the server keeps no history, so a
// restart of Nebula loses nothing and two browsers see different chats.  One
// record per chat keeps a save atomic (a chat is never half written); chats
// are small next to IndexedDB's limits.  Every failure is raised to the
// caller, which shows it: a chat that silently failed to save would be lost.

const DB_NAME = "nebula-webui";
const DB_VERSION = 1;
const STORE = "chats";

let dbPromise = null;

function req(r) {
  return new Promise((resolve, reject) => {
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error || new Error("IndexedDB request failed"));
  });
}

function open() {
  if (dbPromise) return dbPromise;
  dbPromise = new Promise((resolve, reject) => {
    if (!("indexedDB" in globalThis)) {
      reject(new Error("this browser has no IndexedDB: chats cannot be kept"));
      return;
    }
    const r = indexedDB.open(DB_NAME, DB_VERSION);
    r.onupgradeneeded = () => {
      const db = r.result;
      if (!db.objectStoreNames.contains(STORE)) {
        const s = db.createObjectStore(STORE, { keyPath: "id" });
        s.createIndex("updated", "updated");
      }
    };
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error || new Error("cannot open IndexedDB"));
    r.onblocked = () => reject(new Error("IndexedDB is blocked by another tab of this page: close it and reload"));
  });
  dbPromise.catch(() => { dbPromise = null; });
  return dbPromise;
}

async function tx(mode, fn) {
  const db = await open();
  return new Promise((resolve, reject) => {
    const t = db.transaction(STORE, mode);
    let out;
    Promise.resolve(fn(t.objectStore(STORE))).then((v) => { out = v; }, reject);
    t.oncomplete = () => resolve(out);
    t.onerror = () => reject(t.error || new Error("IndexedDB transaction failed"));
    t.onabort = () => reject(t.error || new Error("IndexedDB transaction aborted (disk full?)"));
  });
}

export function newId() {
  if (globalThis.crypto && crypto.randomUUID) return crypto.randomUUID();
  return `${Date.now().toString(36)}-${Math.random().toString(36).slice(2)}`;
}

// All chats, the most recently updated first.
export async function listChats() {
  const all = await tx("readonly", (s) => req(s.getAll()));
  return all.sort((a, b) => b.updated - a.updated);
}

export async function getChat(id) {
  return tx("readonly", (s) => req(s.get(id)));
}

// Stores a deep copy of the chat (its in-memory object keeps changing while
// an answer streams in).
export async function putChat(chat) {
  const copy = JSON.parse(JSON.stringify(chat));
  await tx("readwrite", (s) => req(s.put(copy)));
}

export async function deleteChat(id) {
  await tx("readwrite", (s) => req(s.delete(id)));
}
