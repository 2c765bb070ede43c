/** Imported first by a `*.request-mode.test.ts` file: the suite it imports next runs in request mode (request-mode.ts). */
import { enableRequestMode } from "./request-mode.ts";

enableRequestMode();
