import { main } from './main.js';

await main(process.argv, process.env);
