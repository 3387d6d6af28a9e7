// The page `cpudl serve` answers at `/`: one self-contained HTML file (no external assets) to try
// the loaded models -- a chat box streaming from a language model, an image drop for cpudl's
// classifiers -- and to watch the live metrics. `/?chat=TEXT&max_tokens=N` sends TEXT on load and
// sets the title to "done" when the streamed answer is complete (the headless-Chromium test).
#pragma once

namespace cpudl::serve {

extern const char* const kPage;

}  // namespace cpudl::serve
