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
