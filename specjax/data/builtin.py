"""The project's own small prompt set: a few prompts per category, written for this project,
so the default benchmark needs no download (``specjax bench --prompts builtin``)."""

BUILTIN = [
    # (category, prompt)
    ("chat", "Give me three tips for staying focused while studying."),
    ("chat", "What are some good ways to make new friends after moving to a new city?"),
    ("code", "Write a Python function that checks whether a string is a palindrome, ignoring "
             "case and spaces."),
    ("code", "Rewrite this function with clear variable names and a docstring:\n"
             "def f(a, b):\n    c = 0\n    for d in a:\n        if d > b:\n            c += d\n"
             "    return c\n"),
    # code editing: the answer is mostly the input code again (what prompt lookup is for)
    ("code_editing", "Add type hints to this function. Keep the code otherwise unchanged and "
                     "show the whole function.\n"
                     "def moving_average(values, window):\n"
                     "    if window <= 0:\n"
                     "        raise ValueError(\"window must be positive\")\n"
                     "    averages = []\n"
                     "    total = 0.0\n"
                     "    for i, value in enumerate(values):\n"
                     "        total += value\n"
                     "        if i >= window:\n"
                     "            total -= values[i - window]\n"
                     "        if i >= window - 1:\n"
                     "            averages.append(total / window)\n"
                     "    return averages\n"),
    ("code_editing", "Rename the variable `tmp` to `word_counts` everywhere in this code and "
                     "return the full updated code.\n"
                     "def count_words(lines):\n"
                     "    tmp = {}\n"
                     "    for line in lines:\n"
                     "        for word in line.lower().split():\n"
                     "            word = word.strip(\".,;:!?\")\n"
                     "            if not word:\n"
                     "                continue\n"
                     "            tmp[word] = tmp.get(word, 0) + 1\n"
                     "    return tmp\n\n"
                     "def top_words(lines, n=3):\n"
                     "    tmp = count_words(lines)\n"
                     "    ranked = sorted(tmp.items(), key=lambda kv: kv[1], reverse=True)\n"
                     "    return ranked[:n]\n"),
    ("code_editing", "This function should skip blank lines and lines starting with '#', but "
                     "it does not skip blank lines. Fix it and show the corrected function.\n"
                     "def read_config(path):\n"
                     "    settings = {}\n"
                     "    with open(path) as f:\n"
                     "        for line in f:\n"
                     "            line = line.strip()\n"
                     "            if line.startswith(\"#\"):\n"
                     "                continue\n"
                     "            key, value = line.split(\"=\", 1)\n"
                     "            settings[key.strip()] = value.strip()\n"
                     "    return settings\n"),
    ("math", "A train travels 120 km in 1.5 hours. What is its average speed in km/h? "
             "Explain briefly."),
    ("math", "If a shirt costs $25 and is discounted by 20%, what is the new price? Show the "
             "steps."),
    ("summarization", "Summarize in two sentences: The city council met on Tuesday to discuss "
                      "the new bike lanes. Residents praised the safety benefits but worried "
                      "about parking on Main Street. Shop owners asked for loading zones. The "
                      "council will vote on the final plan next month after a public hearing."),
    ("summarization", "Summarize the following text in one paragraph: The Industrial "
                      "Revolution began in Britain in the late 18th century. It transformed "
                      "economies from agrarian to industrial. Steam engines powered factories, "
                      "and railways connected cities. Workers moved from farms to urban "
                      "centers, which grew rapidly. Living conditions in cities were often "
                      "poor, and reforms followed over the next century."),
    ("rag", "Answer using only the context.\nContext: The Amazon river is about 6,400 km long. "
            "It flows through Peru, Colombia and Brazil and empties into the Atlantic Ocean. "
            "Its basin covers about 7 million square kilometres.\nQuestion: Which countries "
            "does the Amazon flow through, and where does it end?"),
    ("rag", "Using the passage, explain what photosynthesis produces.\nPassage: "
            "Photosynthesis is the process by which green plants use sunlight, water and carbon "
            "dioxide to produce glucose and oxygen. It takes place mainly in the leaves, inside "
            "chloroplasts, which contain chlorophyll."),
]
