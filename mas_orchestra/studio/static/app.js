// Router: #live, #live/<thread>, #browse, #browse/<folder>, #browse/<folder>/<row>.
"use strict";

let studioReady = null;

async function route() {
  await studioReady;
  const [view, a, b] = location.hash.replace(/^#/, "").split("/");
  const browse = view === "browse";
  $("view-live").hidden = browse;
  $("view-browse").hidden = !browse;
  $("tab-live").classList.toggle("active", !browse);
  $("tab-browse").classList.toggle("active", browse);
  try {
    if (browse) {
      if (a !== undefined && a !== "") await openFolder(Number(a));
      if (b !== undefined && b !== "") await openSample(Number(a), Number(b));
    } else if (a) {
      await openThread(decodeURIComponent(a));
    }
  } catch (error) {
    const box = browse ? $("sample-detail") : $("result");
    put(box, el("p", { class: "error", role: "alert" }, error.message));
  }
}

studioReady = (async () => {
  const config = await api("/api/config");
  await Promise.all([liveInit(config), browseInit()]);
  document.body.dataset.ready = "1";
})();
window.addEventListener("hashchange", route);
route();
