// The only third-party code the studio page uses: dagre's layered (Sugiyama) DAG layout, exposed as
// window.dagre for static/app.js. Rendering, interaction and styling are the studio's own.
import * as dagre from "@dagrejs/dagre";

globalThis.dagre = dagre;
