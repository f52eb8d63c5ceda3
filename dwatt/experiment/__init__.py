"""The experiment side: grids of runs and their results stores (`grid`, `store`, `sweep`), the probe of every layer
(`probe`), choices on dev scored on test (`selection`), and the tables and figures read from the stores
(`summaries`, `report`, `figures`). The core (training, serving, data, the models) never imports this package;
only the modules that read stores into tables import pandas, and only the figures matplotlib."""
